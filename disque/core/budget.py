"""The cluster split of a queue limit (QLIMIT, docs/extensions.md): which
part of the queue's rate and of its concurrency each node may use.

Every node that reads bus version 6 reports, a few times a second, its
*demand* for each limited queue (QDEMAND: its consumers, see
:mod:`disque.core.qlimits`) and how many of the queue's jobs it has in
flight.  Each node then computes the whole split from the same reports
(its own included: the value it last *sent*, not a fresher one), so every
node that holds the same reports computes the same split, and the parts
add up to the limit:

* the **weight** of a node is ``FLOOR + DEMAND_UNIT * demand``: a node
  with no consumer keeps a small part (``FLOOR`` against ``DEMAND_UNIT``
  per consumer), so a consumer that comes there is served at once;
* its **rate share** is ``weight / total weight`` of the rate (and of the
  burst, at least one token: a bucket of less than one never delivers);
* its **slots** of the concurrency: one for each node with demand (while
  slots last, the heaviest first), then the rest apportioned by weight
  with the largest remainders, in integers (ties broken by node ID), so
  they add up to exactly ``C`` and no node's consumers starve.

Integers throughout but the rate share's one division, so the split does
not depend on the runtime's float formatting or summation order.
"""

FLOOR = 1  # weight of a node with no demand
DEMAND_UNIT = 10  # weight of one unit of demand (one waiting consumer)


def weight(demand: int) -> int:
    return FLOOR + DEMAND_UNIT * demand


def slots(concurrency: int, weights: dict) -> dict:
    """``{node: slots}``: ``concurrency`` split by ``weights`` (``{node
    ID: weight >= FLOOR}``); the values add up to ``concurrency``.  Each
    node with demand (weight above ``FLOOR``) gets one slot first, the
    heaviest first while slots last, so no consumer starves behind a busier
    node; the rest goes by weight with the largest remainders.  Ties are
    broken by node ID: the same inputs give the same answer on every node."""
    out = dict.fromkeys(weights, 0)
    wanting = sorted((n for n, w in weights.items() if w > FLOOR), key=lambda n: (-weights[n], n))
    for node_id in wanting[:concurrency]:
        out[node_id] = 1
    pool = concurrency - min(len(wanting), concurrency)
    total = sum(weights.values())
    left = pool
    remainders = []
    for node_id in sorted(weights):
        share, remainder = divmod(pool * weights[node_id], total)
        out[node_id] += share
        left -= share
        remainders.append((-remainder, node_id))
    remainders.sort()
    for _, node_id in remainders[:left]:
        out[node_id] += 1
    return out
