/* The dashboard of a disque node (disque/http/dashboard.py).
 *
 * Plain JavaScript, no framework and no build step.  It polls the JSON API
 * of the node that served it (same origin: the browser sends the password
 * it was asked for with every request) and stops polling while the tab is
 * hidden.
 *
 * Queue names and job bodies are user data: they only ever reach the page
 * as text (textContent, attribute values set one by one), never as HTML.
 */
(function () {
  "use strict";

  var POLL_MS = 1500;
  var JOBS_SHOWN = 100;
  var CHART_SPAN_MS = 5 * 60 * 1000;
  var PAUSE_STATES = ["none", "in", "out", "all"];
  var PAUSE_TITLES = {
    none: "Not paused: jobs enter and leave the queue",
    in: "Pause in: ADDJOB is refused on this queue",
    out: "Pause out: GETJOB serves no job from this queue",
    all: "Pause in and out"
  };
  var NO_ACTIONS = "Actions from this page need a user who may run PAUSE, ENQUEUE and ACKJOB " +
    "(+@manage +@consume, or +@all): sign in as one to pause queues, requeue or delete jobs.";

  // Requests go to this origin without the user:password@ part of the
  // address (fetch refuses URLs holding credentials).
  var BASE = location.origin + location.pathname;

  var state = {
    node: null,
    actions: null,
    view: "overview",
    queue: null,
    queues: [],
    filter: "",
    sort: loadSort(),
    bcast: false,
    job: null,
    timer: null,
    gen: 0
  };

  // --- small helpers -------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  function el(tag, opts) {
    var node = document.createElement(tag);
    opts = opts || {};
    if (opts.cls) node.className = opts.cls;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.title) node.title = opts.title;
    if (opts.attrs) {
      Object.keys(opts.attrs).forEach(function (k) { node.setAttribute(k, opts.attrs[k]); });
    }
    if (opts.on) {
      Object.keys(opts.on).forEach(function (k) { node.addEventListener(k, opts.on[k]); });
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function setText(node, text) {
    text = text === null || text === undefined ? "" : String(text);
    if (node.textContent !== text) node.textContent = text;
  }

  function setClass(node, cls) { if (node.className !== cls) node.className = cls; }

  function enc(s) { return encodeURIComponent(s); }

  function num(n) {
    if (n === null || n === undefined) return "–";
    return Number(n).toLocaleString("en-US");
  }

  function rate(r) {
    if (!r) return "0";
    if (r < 10) return r.toFixed(1);
    return Math.round(r).toLocaleString("en-US");
  }

  function compact(n) {
    var a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e3) return (n / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
    if (a > 0 && a < 10 && n % 1) return n.toFixed(1);
    return String(Math.round(n));
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
  }

  function dur(s) {  // seconds, as "4s", "3m 12s", "2h 05m", "3d 4h"
    if (s === null || s === undefined) return "–";
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m " + (s % 60) + "s";
    var h = Math.floor(m / 60);
    if (h < 24) return h + "h " + String(m % 60).padStart(2, "0") + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }

  function latency(seconds) {
    if (!seconds) return "0";
    var ms = seconds * 1000;
    if (ms < 1) return ms.toFixed(2) + " ms";
    if (ms < 100) return ms.toFixed(1) + " ms";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 10000) return (ms / 1000).toFixed(2) + " s";
    return dur(ms / 1000);
  }

  function clock(ms) {
    var d = new Date(ms);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map(function (x) {
      return String(x).padStart(2, "0");
    }).join(":");
  }

  function shortNode(id) { return id.length > 12 ? id.slice(0, 8) : id; }

  function shortJob(id) { return id.length > 24 ? id.slice(0, 20) + "…" : id; }

  function nodeTime() { return state.node ? state.node.time : Date.now(); }

  function loadSort() {
    try {
      var s = JSON.parse(localStorage.getItem("disque.sort"));
      if (s && typeof s.key === "string" && (s.dir === 1 || s.dir === -1)) return s;
    } catch (e) { /* no storage: the default order */ }
    return { key: "len", dir: -1 };
  }

  function saveSort() {
    try { localStorage.setItem("disque.sort", JSON.stringify(state.sort)); } catch (e) { /* ignored */ }
  }

  // --- the API ---------------------------------------------------------------

  function apiError(status, body) {
    var err = new Error(body && body.error ? body.error : "HTTP " + status);
    err.status = status;
    return err;
  }

  function api(path, options) {
    var opts = Object.assign({ cache: "no-store", credentials: "same-origin" }, options || {});
    opts.headers = Object.assign({ "Accept": "application/json" }, opts.headers || {});
    return fetch(new URL(path, BASE).href, opts).then(function (r) {
      return r.text().then(function (text) {
        var body = null;
        try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
        if (!r.ok) throw apiError(r.status, body);
        return body;
      });
    });
  }

  function act(path, payload) {
    return api(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Disque-Action": "1" },
      body: JSON.stringify(payload || {})
    });
  }

  // --- status, banner, toasts ------------------------------------------------

  function setStatus(kind, text) {
    setClass($("status"), "status " + kind);
    setText($("status-text"), text);
  }

  function banner(text) {
    var b = $("banner");
    if (!text) { b.hidden = true; return; }
    setText(b, text);
    b.hidden = false;
  }

  function toast(text, bad) {
    var t = el("div", { cls: "toast" + (bad ? " bad" : ""), text: text });
    $("toasts").appendChild(t);
    setTimeout(function () { t.remove(); }, bad ? 6000 : 3000);
  }

  // --- polling ---------------------------------------------------------------

  function poll() {
    clearTimeout(state.timer);
    state.timer = null;
    if (document.hidden) {
      setStatus("idle", "paused while hidden");
      return;
    }
    var gen = ++state.gen;
    var work = [api("api/node").then(function (n) { if (gen === state.gen) renderNode(n); })];
    if (state.view === "overview") {
      var q = "api/queues" + (state.filter ? "?filter=" + enc(state.filter) : "");
      var c = "api/cluster" + (state.filter ? "?filter=" + enc(state.filter) : "");
      work.push(api(c).then(function (r) { if (gen === state.gen) renderCluster(r); }));
      work.push(api(q).then(function (r) { if (gen === state.gen) renderQueues(r); }));
      work.push(api("api/rates").then(function (r) { if (gen === state.gen) renderRates(r); }));
      work.push(api("api/schedules").then(function (r) { if (gen === state.gen) renderSchedules(r); }, function (err) {
        if (err.status !== 403) throw err;  // a user who may not list schedules: no panel
        if (gen === state.gen) renderSchedules({ schedules: [] });
      }));
    } else {
      var name = state.queue;
      work.push(api("api/queues/" + enc(name) + "?count=" + JOBS_SHOWN).then(function (r) {
        if (gen === state.gen && name === state.queue) renderQueueView(r);
      }, function (err) {
        if (err.status !== 404) throw err;
        if (gen === state.gen && name === state.queue) renderQueueView(null);
      }));
      if (state.job) work.push(loadJob(state.job));
    }
    Promise.all(work).then(function () {
      if (gen !== state.gen) return;
      banner(null);
      setStatus("live", "live · " + clock(nodeTime()));
    }, function (err) {
      if (gen !== state.gen) return;
      if (err.status === 401) {
        banner("The node asks for its password: reload the page to sign in.");
      } else if (err.status) {
        banner("The node answered " + err.status + ": " + err.message);
      } else {
        banner("Cannot reach the node (" + err.message + "): retrying.");
      }
      setStatus("error", "offline");
    }).then(function () {
      if (gen === state.gen && !document.hidden) state.timer = setTimeout(poll, POLL_MS);
    });
  }

  // --- header and cards --------------------------------------------------------

  function renderNode(n) {
    state.node = n;
    var actions = !!n.actions;
    if (actions !== state.actions) {
      state.actions = actions;
      refreshActions();
    }
    setText($("node-id"), shortNode(n.id));
    $("node-id").title = "Node " + n.id;
    document.title = "disque · " + shortNode(n.id);
    setText($("f-version"), n.version + " · " + n.runtime);
    setText($("f-uptime"), dur(n.uptime));
    setText($("f-memory"), bytes(n.memory.used) + (n.memory.max ? " of " + bytes(n.memory.max) : ""));
    setText($("f-clients"), num(n.clients.connected) + (n.clients.blocked ? " (" + num(n.clients.blocked) + " blocked)" : ""));

    setText($("c-jobs-total"), num(n.jobs.total));
    ["queued", "active", "wait_repl", "acked"].forEach(function (k) {
      setText($("c-jobs-" + k), num(n.jobs[k]));
    });
    setText($("c-queues"), n.queues === undefined ? "–" : num(n.queues) + (n.queues === 1 ? " queue" : " queues"));
    setText($("c-clients"), num(n.clients.connected));
    setText($("c-blocked"), num(n.clients.blocked));

    setText($("c-mem-used"), bytes(n.memory.used));
    setText($("c-mem-max"), n.memory.max ? bytes(n.memory.max) : "no limit");
    setText($("c-mem-rss"), bytes(n.memory.rss));
    var bar = $("c-mem-bar");
    bar.hidden = !n.memory.max;
    if (n.memory.max) {
      var perc = Math.min(100, 100 * n.memory.used / n.memory.max);
      bar.firstElementChild.style.width = perc.toFixed(1) + "%";
      setClass(bar, perc > 90 ? "bar hot" : "bar");
      bar.title = perc.toFixed(1) + "% of maxmemory";
    }

    var names = { getjob_wait: "GETJOB wait", addjob_replication: "replication", add_to_ack: "ADDJOB → ACK" };
    var titles = {
      getjob_wait: "Time GETJOB waited for a job", addjob_replication: "Time ADDJOB waited for its copies",
      add_to_ack: "Time from ADDJOB to the job's acknowledgement"
    };
    var rows = Object.keys(n.latency || {}).map(function (k) {
      var l = n.latency[k];
      var none = !l.count;  // no sample: no time was measured, which is not a time of 0
      var tr = el("tr", { title: (titles[k] || "") + (none ? " (nothing measured yet)" : "") },
        el("td", { text: names[k] || k }), el("td", { text: none ? "–" : latency(l.p50) }),
        el("td", { text: none ? "–" : latency(l.p99) }), el("td", { text: compact(l.count || 0) }));
      tr.dataset.latency = k;
      if (none) tr.className = "dim";
      return tr;
    });
    $("c-latency").replaceChildren.apply($("c-latency"), rows);

    renderPersistence(n.persistence || {});
  }

  function progressBar(label, perc, eta) {
    perc = Math.max(0, Math.min(100, Number(perc) || 0));
    var b = el("div", { cls: "bar" }, el("span"));
    b.firstChild.style.width = perc.toFixed(1) + "%";
    b.setAttribute("role", "progressbar");
    b.setAttribute("aria-valuenow", perc.toFixed(0));
    b.setAttribute("aria-valuemin", "0");
    b.setAttribute("aria-valuemax", "100");
    b.setAttribute("aria-label", label);
    return el("div", { cls: "progress" },
      el("div", { cls: "label" }, el("span", { text: label }),
        el("span", { text: perc.toFixed(1) + "%" + (eta !== undefined ? " · " + dur(eta) + " left" : "") })),
      b);
  }

  function renderPersistence(p) {
    var on = Number(p.aof_enabled) === 1;
    setText($("c-aof"), Number(p.loading) === 1 ? "Loading" : p.aof_last_write_status === "err" ? "AOF error"
      : on ? "AOF on" : "AOF off");
    var bars = [];
    if (Number(p.loading) === 1) {
      bars.push(progressBar("Loading the AOF", p.loading_loaded_perc, p.loading_eta_seconds));
    }
    if (Number(p.aof_rewrite_in_progress) === 1) {
      bars.push(progressBar("Rewriting the AOF", p.aof_rewrite_progress_perc, p.aof_rewrite_eta_seconds));
    }
    $("c-progress").replaceChildren.apply($("c-progress"), bars);
    var pairs = [];
    function pair(k, v) { pairs.push(el("div", null, el("dt", { text: k }), el("dd", { text: v }))); }
    if (p.aof_current_size !== undefined) pair("size", bytes(p.aof_current_size));
    if (p.aof_last_write_status !== undefined) pair("last write", p.aof_last_write_status);
    if (p.aof_last_write_error !== undefined) pair("writes refused", p.aof_last_write_error);
    if (p.nodes_file_status !== undefined && p.nodes_file_status !== "ok") pair("node file", p.nodes_file_status);
    if (p.aof_last_bgrewrite_status !== undefined) pair("last rewrite", p.aof_last_bgrewrite_status);
    $("c-aof-pairs").replaceChildren.apply($("c-aof-pairs"), pairs);
  }

  // --- keyed tables ------------------------------------------------------------
  // Rows keep their elements from one poll to the next (a button being
  // clicked is never replaced under the pointer); only changed text is set.

  function syncRows(tbody, items, keyOf, create, update) {
    var old = tbody._rows || new Map();
    var next = new Map();
    var empty = tbody.querySelector("tr.empty-row");
    if (empty) empty.remove();
    items.forEach(function (item, i) {
      var key = keyOf(item);
      var tr = old.get(key);
      if (!tr) tr = create(item);
      update(tr, item);
      next.set(key, tr);
      var at = tbody.children[i];
      if (at !== tr) tbody.insertBefore(tr, at || null);
    });
    old.forEach(function (tr, key) { if (!next.has(key)) tr.remove(); });
    tbody._rows = next;
  }

  function emptyRow(tbody, columns, text) {
    syncRows(tbody, [], null, null, null);
    tbody.appendChild(el("tr", { cls: "empty-row" }, el("td", { cls: "empty", text: text, attrs: { colspan: String(columns) } })));
  }

  function pill(cls, text) { return el("span", { cls: "pill " + cls, text: text }); }

  function setPill(node, cls, text) {
    setClass(node, "pill " + cls);
    setText(node, text);
  }

  // --- cluster -----------------------------------------------------------------

  var ANSWERS = {
    ok: ["ok", "counted", "Its counts are in the sums below"],
    unreachable: ["bad", "unreachable", "No bus link to it: its counts are not in the sums below"],
    timeout: ["warn", "no answer", "Asked over the bus, no answer within 1 s: its counts are not in the sums below"],
    "old-version": ["warn", "older version", "It runs a version that does not give its counts: they are not in the sums below"]
  };

  function renderCluster(r) {
    renderNodes(r);
    renderClusterQueues(r);
  }

  function dashboardLink(td, n) {
    var want = n.myself ? "this page" : n.dashboard || "";
    if (td.dataset.url === want) return;
    td.dataset.url = want;
    if (n.myself) {
      td.replaceChildren(el("span", { cls: "dim", text: "this page" }));
    } else if (n.dashboard) {
      var shown = n.dashboard.replace(/^https?:\/\//, "").replace(/\/$/, "");
      td.replaceChildren(el("a", { cls: "mono", text: shown, title: "This node's dashboard (it asks for its own password)",
        attrs: { href: n.dashboard, rel: "noopener noreferrer" } }));
    } else {
      td.replaceChildren(el("span", { cls: "dim", text: "–",
        title: n.answer === "ok" ? "No HTTP side (http-port 0)" : "Not known: the node did not answer" }));
    }
  }

  function renderNodes(r) {
    var tbody = $("nodes").tBodies[0];
    var nodes = r.nodes || [];
    syncRows(tbody, nodes, function (n) { return n.id; }, function (n) {
      var tr = el("tr", { attrs: { "data-node": n.id } },
        el("td", null, el("span", { cls: "mono", text: shortNode(n.id), title: n.id }), " ", pill("info", "")),
        el("td", { cls: "mono" }), el("td", null, pill("", "")), el("td", null, pill("", "")),
        el("td", null, pill("warn", "")), el("td", { cls: "num" }), el("td", { cls: "num" }),
        el("td", null, pill("", "")), el("td"), el("td", { cls: "mono dim" }));
      return tr;
    }, function (tr, n) {
      var td = tr.children;
      setText(td[0].lastChild, n.myself ? "this node" : "");
      // A node learns its own host from its peers: ":7711" until then.
      setText(td[1], n.address.charAt(0) === ":" ? "port " + n.address.slice(1) : n.address);
      setPill(td[2].firstChild, n.up ? "ok" : "bad", n.up ? "up" : "down");
      if (n.myself) setPill(td[3].firstChild, "", "");
      else setPill(td[3].firstChild, n.connected ? "ok" : "warn", n.connected ? "connected" : "no link");
      setText(td[4].firstChild, n.leaving ? "leaving" : "");
      var answer = ANSWERS[n.answer] || ["warn", n.answer || "", ""];
      setText(td[5], n.jobs === null || n.jobs === undefined ? "?" : num(n.jobs));
      setText(td[6], n.queued === null || n.queued === undefined ? "?" : num(n.queued));
      setPill(td[7].firstChild, answer[0], answer[1]);
      td[7].title = answer[2];
      dashboardLink(td[8], n);
      setText(td[9], n.flags);
      tr.dataset.up = n.up ? "1" : "0";
      tr.dataset.answer = n.answer || "";
      setClass(tr, !n.up ? "down" : n.leaving ? "leaving" : "");
    });
    var up = nodes.filter(function (n) { return n.up; }).length;
    var leaving = nodes.filter(function (n) { return n.leaving; }).length;
    setText($("cluster-summary"), nodes.length + (nodes.length === 1 ? " node" : " nodes") + " · " + up + " up" +
      (nodes.length - up ? " · " + (nodes.length - up) + " down" : "") + (leaving ? " · " + leaving + " leaving" : ""));
  }

  // --- schedules (docs/extensions.md): shown once there is one ---------------------------

  function renderSchedules(r) {
    var list = r.schedules || [];
    $("schedules").hidden = list.length === 0;
    syncRows($("schedule-table").tBodies[0], list, function (s) { return s.name; }, function (s) {
      return el("tr", { attrs: { "data-schedule": s.name } },
        el("td", { cls: "mono" }), el("td", { cls: "mono" }), el("td", { cls: "mono" }), el("td", null, pill("", "")),
        el("td", { cls: "num" }), el("td", { cls: "num" }), el("td", { cls: "num" }), el("td"), el("td"),
        el("td", { cls: "dim" }));
    }, function (tr, s) {
      var td = tr.children;
      setText(td[0], s.name);
      setText(td[1], s.queue);
      setText(td[2], s.when);
      setPill(td[3].firstChild, s.state === "active" ? "ok" : "warn", s.state);
      setText(td[4], num(s.runs));
      setText(td[5], num(s.skipped));
      setText(td[6], num(s.fired_here));
      setText(td[7], s.last_run ? clock(s.last_run) : "–");
      setText(td[8], clock(s.next_run));
      setText(td[9], s.last_error || "");
    });
    var paused = list.filter(function (s) { return s.state === "paused"; }).length;
    setText($("schedules-summary"), list.length + (list.length === 1 ? " schedule" : " schedules") +
      (paused ? " · " + paused + " paused" : ""));
  }

  // --- queues across the cluster ------------------------------------------------------

  var CQ_SUMS = [
    { key: "added", label: "Added", title: "Jobs queued, summed over the nodes (a move counts on the node it reached)" },
    { key: "removed", label: "Removed", title: "Jobs taken out, summed: delivered to consumers, or moved to another node" },
    { key: "moved_out", label: "Moved out", title: "Jobs a node handed to another (federation), summed" },
    { key: "moved_in", label: "Moved in", title: "Jobs a node received from another (federation), summed" },
    { key: "acked", label: "Acked", title: "Acknowledgements received, summed" },
    { key: "nacked", label: "Nacked", title: "NACKs received, summed" }
  ];

  function renderClusterQueues(r) {
    var nodes = r.nodes || [];
    var table = $("cq-table");
    var head = table.tHead.rows[0];
    var sig = nodes.map(function (n) { return n.id + "/" + n.answer + "/" + (n.dashboard || ""); }).join(" ");
    var tbody = table.tBodies[0];
    if (head.dataset.sig !== sig) {  // the nodes changed: new columns, new rows
      head.dataset.sig = sig;
      var cells = [el("th", { text: "Queue" }), el("th", { cls: "num", text: "Jobs", title: "Jobs queued, summed over the nodes counted" })];
      nodes.forEach(function (n) {
        var label = shortNode(n.id);
        var th = el("th", { cls: "num node-col", title: "Jobs queued on node " + n.id + (n.myself ? " (this node)" : "") +
          (n.answer === "ok" ? "" : ": " + (ANSWERS[n.answer] || [0, n.answer])[1] + ", not counted") });
        th.dataset.node = n.id;
        if (n.dashboard) th.appendChild(el("a", { cls: "mono", text: label, attrs: { href: n.dashboard, rel: "noopener noreferrer" } }));
        else th.appendChild(el("span", { cls: "mono", text: label + (n.myself ? " (this)" : "") }));
        if (n.answer !== "ok") th.classList.add("uncounted");
        cells.push(th);
      });
      CQ_SUMS.forEach(function (c) { cells.push(el("th", { cls: "num", text: c.label, title: c.title })); });
      head.replaceChildren.apply(head, cells);
      syncRows(tbody, [], null, null, null);
    }
    var queues = r.queues || [];
    var columns = 2 + nodes.length + CQ_SUMS.length;
    if (!queues.length) {
      emptyRow(tbody, columns, state.filter ? "No queue name holds “" + state.filter + "” on the nodes counted." :
        "No queues on the nodes counted.");
    } else {
      syncRows(tbody, queues, function (q) { return q.name; }, function (q) {
        var tr = el("tr", null, el("td", { cls: "qname-cell", text: q.name, title: q.name }), el("td", { cls: "num total" }));
        tr.dataset.cq = q.name;
        nodes.forEach(function (n) {
          var td = el("td", { cls: "num" });
          td.dataset.node = n.id;
          tr.appendChild(td);
        });
        CQ_SUMS.forEach(function (c) { tr.appendChild(el("td", { cls: "num", attrs: { "data-key": c.key } })); });
        return tr;
      }, function (tr, q) {
        var td = tr.children;
        setText(td[1], num(q.len));
        nodes.forEach(function (n, i) {
          var cell = td[2 + i];
          var v = q.nodes ? q.nodes[n.id] : undefined;
          if (v === undefined) {
            setText(cell, "?");
            cell.title = "Not counted: node " + shortNode(n.id) + " " + (ANSWERS[n.answer] || [0, n.answer])[1];
          } else if (v === null) {
            setText(cell, "?");
            cell.title = "Not among the longest queues that node gave";
          } else {
            setText(cell, num(v));
            cell.title = "";
          }
          var muted = v === 0 || v === undefined || v === null;
          if (cell.classList.contains("zero") !== muted) cell.classList.toggle("zero", muted);
        });
        CQ_SUMS.forEach(function (c, i) { setText(td[2 + nodes.length + i], num(q[c.key])); });
      });
    }
    var counted = nodes.filter(function (n) { return n.answer === "ok"; });
    var missing = nodes.filter(function (n) { return n.answer !== "ok"; });
    setText($("cq-summary"), counted.length + " of " + nodes.length + (nodes.length === 1 ? " node" : " nodes") + " counted · " +
      num(r.distinct) + (r.distinct === 1 ? " queue" : " queues") + (queues.length < r.distinct ? " · " + queues.length + " longest shown" : ""));
    var partial = $("cq-partial");
    if (missing.length) {
      setText(partial, "Partial: " + missing.map(function (n) {
        return shortNode(n.id) + " " + (ANSWERS[n.answer] || [0, n.answer])[1];
      }).join(", ") + ". " + (missing.length === 1 ? "Its jobs are" : "Their jobs are") + " not in these sums.");
      partial.hidden = false;
    } else {
      partial.hidden = true;
    }
    $("cluster-queues").dataset.complete = r.complete ? "1" : "0";
    $("cluster-queues").hidden = nodes.length < 2;  // one node: the same as its own queues below
  }

  // --- queues ------------------------------------------------------------------

  var PAUSE_ORDER = { none: 0, in: 1, out: 2, all: 3 };
  var RATE_TITLE = "Per second over the last 10 s (the rates chart uses the same window)";
  var QCOLS = [
    { key: "name", label: "Queue", str: true },
    { key: "len", label: "Jobs", fmt: num },
    { key: "age", label: "Oldest", fmt: function (v, q) { return q.len ? dur(v) : "–"; } },
    { key: "rate_in", label: "In/s", fmt: rate, title: RATE_TITLE },
    { key: "rate_out", label: "Out/s", fmt: rate, title: RATE_TITLE },
    { key: "rate_ack", label: "Ack/s", fmt: rate, title: RATE_TITLE },
    { key: "rate_nack", label: "Nack/s", fmt: rate, title: RATE_TITLE },
    { key: "added", label: "Added", fmt: num, title: "Jobs queued here: new, requeued, or moved in from another node" },
    { key: "removed", label: "Removed", fmt: num, title: "Jobs taken out: delivered to consumers, or moved out to another node" },
    { key: "moved_out", label: "Moved out", fmt: num, wrap: true, title: "Jobs handed to other nodes whose consumers asked (federation): part of Removed" },
    { key: "moved_in", label: "Moved in", fmt: num, wrap: true, title: "Jobs other nodes handed here (federation): part of Added" },
    { key: "acked", label: "Acked", fmt: num },
    { key: "nacked", label: "Nacked", fmt: num },
    { key: "blocked", label: "Blocked", fmt: num, title: "Clients blocked in GETJOB on this queue" },
    { key: "paused", label: "Paused", str: true },
    { key: null, label: "Pause" }
  ];

  function buildQueueHead() {
    var tr = $("queue-table").tHead.rows[0];
    QCOLS.forEach(function (c) {
      var th = el("th", { text: c.label, title: c.title || "" });
      if (c.fmt) th.className = "num";
      if (c.wrap) th.classList.add("wrap");  // two short lines: the table fits 1280 px with its pause buttons
      if (c.key) {
        th.classList.add("sort");
        th.tabIndex = 0;
        th.dataset.key = c.key;
        var sort = function () {
          if (state.sort.key === c.key) state.sort.dir = -state.sort.dir;
          else state.sort = { key: c.key, dir: c.str ? 1 : -1 };
          saveSort();
          drawQueues();
        };
        th.addEventListener("click", sort);
        th.addEventListener("keydown", function (e) {
          if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
        });
      }
      tr.appendChild(th);
    });
  }

  // A limited queue (QLIMIT, docs/extensions.md): its limits beside its name.
  function limitPill(span, limit) {
    var parts = [];
    if (limit && limit.rate !== null) parts.push(limit.rate + "/s");
    if (limit && limit.concurrency) parts.push(limit.in_flight + " of " + limit.concurrency + " in flight");
    setText(span, parts.join(" · "));
    span.hidden = !limit;
    span.title = limit ? "Limited for the whole cluster (QLIMIT): " + (limit.rate !== null ? limit.rate +
      " deliveries a second, burst " + limit.burst + "; " : "") + (limit.concurrency ? "at most " +
      limit.concurrency + " jobs in flight; " : "") + limit.held + " GETJOBs held here" : "";
  }

  function sortValue(q, key) { return key === "paused" ? PAUSE_ORDER[q.paused] || 0 : q[key]; }

  function pauseControl(nameOf) {
    var seg = el("div", { cls: "seg", attrs: { role: "group", "aria-label": "Pause state" } });
    PAUSE_STATES.forEach(function (s) {
      seg.appendChild(el("button", {
        cls: "p-" + s, text: s,
        attrs: { type: "button", "data-state": s, "aria-pressed": "false" },
        on: { click: function () { pauseQueue(nameOf(), s, seg); } }
      }));
    });
    return seg;
  }

  function updatePauseControl(seg, current) {
    seg.dataset.current = current;
    Array.prototype.forEach.call(seg.children, function (b) {
      var s = b.dataset.state;
      var pressed = String(s === current);
      if (b.getAttribute("aria-pressed") !== pressed) b.setAttribute("aria-pressed", pressed);
      b.disabled = !state.actions;
      var title = state.actions ? PAUSE_TITLES[s] : NO_ACTIONS;
      if (b.title !== title) b.title = title;
    });
  }

  function pauseQueue(name, s, seg) {
    if (!state.actions) return;
    seg.classList.add("busy");
    act("api/queues/" + enc(name) + "/pause", { state: s, bcast: state.bcast }).then(function (r) {
      toast((s === "none" ? "Unpaused queue " : "Paused queue ") + name + (s === "none" ? "" : " (" + s + ")") +
        (state.bcast ? " on all nodes" : ""));
      if (r && r.queue) {
        state.queues = state.queues.map(function (q) { return q.name === r.queue.name ? r.queue : q; });
        if (state.view === "overview") drawQueues();
        else renderQueueHead(r.queue);
      }
      poll();
    }, function (err) {
      toast("Pause failed: " + err.message, true);
    }).then(function () { seg.classList.remove("busy"); });
  }

  function refreshActions() {
    var off = state.actions === false;  // null: not known before the first answer
    [$("actions-notice"), $("q-actions-notice")].forEach(function (p) {
      setText(p, off ? NO_ACTIONS : "");
      p.hidden = !off;
    });
    document.querySelectorAll(".seg").forEach(function (seg) {
      updatePauseControl(seg, seg.dataset.current || "none");
    });
    document.querySelectorAll("button.job-action").forEach(function (b) {
      b.disabled = !state.actions;
      b.title = state.actions ? b.dataset.title : NO_ACTIONS;
    });
  }

  function renderQueues(r) {
    state.queues = r.queues || [];
    state.queueTotal = r.total;
    state.queueMatching = r.matching;
    drawQueues();
  }

  function drawQueues() {
    var key = state.sort.key;
    var dir = state.sort.dir;
    var f = state.filter;
    var rows = state.queues.filter(function (q) { return !f || q.name.indexOf(f) !== -1; });
    rows.sort(function (a, b) {
      var x = sortValue(a, key);
      var y = sortValue(b, key);
      var c = typeof x === "string" ? x.localeCompare(y) : x - y;
      return c * dir || a.name.localeCompare(b.name);
    });
    Array.prototype.forEach.call($("queue-table").tHead.rows[0].cells, function (th) {
      var s = th.dataset.key === key ? (dir > 0 ? "ascending" : "descending") : null;
      if (s) th.setAttribute("aria-sort", s); else th.removeAttribute("aria-sort");
    });
    var tbody = $("queue-table").tBodies[0];
    if (!rows.length) {
      emptyRow(tbody, QCOLS.length, f ? "No queue name holds “" + f + "”." :
        "No queues on this node yet: a queue appears with its first job (ADDJOB).");
    } else {
      syncRows(tbody, rows, function (q) { return q.name; }, createQueueRow, updateQueueRow);
    }
    var total = state.queueTotal === undefined ? rows.length : state.queueTotal;
    setText($("queues-summary"), f ? rows.length + " of " + num(total) + " match" :
      num(total) + (total === 1 ? " queue" : " queues") + (rows.length < total ? " · " + rows.length + " longest shown" : ""));
  }

  function createQueueRow(q) {
    var tr = el("tr");
    tr.dataset.queue = q.name;
    QCOLS.forEach(function (c) {
      if (c.key === "name") {
        tr.appendChild(el("td", null, el("a", { cls: "qlink", text: q.name, title: q.name, attrs: { href: "#/queue/" + enc(q.name) } }),
          el("span", { cls: "pill info limit" }), el("span", { cls: "pill warn by-name" })));
      } else if (c.key === "paused") {
        tr.appendChild(el("td", { cls: "pstate" }, pill("", "")));
      } else if (!c.key) {
        tr.appendChild(el("td", null, pauseControl(function () { return q.name; })));
      } else {
        tr.appendChild(el("td", { cls: "num" }));
      }
    });
    return tr;
  }

  function updateQueueRow(tr, q) {
    var td = tr.children;
    QCOLS.forEach(function (c, i) {
      if (c.fmt) {
        setText(td[i], c.fmt(q[c.key], q));
        td[i].dataset.value = String(q[c.key]);
        var zero = !q[c.key] && c.key !== "len";
        if (td[i].classList.contains("zero") !== zero) td[i].classList.toggle("zero", zero);
      }
    });
    limitPill(td[0].children[1], q.limit);
    var paused = q.paused && q.paused !== "none";
    setPill(td[QCOLS.length - 2].firstChild, paused ? "warn" : "", paused ? q.paused : "");
    setText(td[0].lastChild, paused ? q.paused : "");
    updatePauseControl(td[QCOLS.length - 1].firstChild, q.paused || "none");
    tr.dataset.paused = q.paused || "none";
    setClass(tr, paused ? "paused" : "");
  }

  // --- charts --------------------------------------------------------------------

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
  }

  function niceStep(v) {  // the smallest of 1, 2, 2.5, 5 times a power of ten at least v
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (v <= steps[i] * p * (1 + 1e-9)) return steps[i] * p;
    }
    return 10 * p;
  }

  function Chart(canvas, legend, series, opts) {
    this.canvas = canvas;
    this.series = series;
    this.opts = opts || {};
    this.samples = [];
    this.hover = null;
    this.values = {};
    var self = this;
    series.forEach(function (s) {
      var value = el("b", { text: "–" });
      legend.appendChild(el("li", null, el("i", { attrs: { "data-color": s.color } }), s.label + " ", value));
      self.values[s.key] = value;
    });
    this.swatches = legend.querySelectorAll("i");
    canvas.addEventListener("pointermove", function (e) { self.pointAt(e.offsetX); });
    canvas.addEventListener("pointerleave", function () { self.hover = null; self.draw(); });
  }

  Chart.prototype.setSamples = function (samples) {
    this.samples = samples;
    if (this.hover !== null && this.hover >= samples.length) this.hover = null;
    this.draw();
  };

  Chart.prototype.geometry = function () {
    var w = this.canvas.clientWidth;
    var h = this.canvas.clientHeight;
    var last = this.samples.length ? this.samples[this.samples.length - 1].t : nodeTime();
    return { w: w, h: h, left: 46, right: 10, top: 8, bottom: 22, t1: last, t0: last - CHART_SPAN_MS };
  };

  Chart.prototype.pointAt = function (x) {
    if (!this.samples.length) return;
    var g = this.geometry();
    var t = g.t0 + (x - g.left) / (g.w - g.left - g.right) * CHART_SPAN_MS;
    var best = 0;
    for (var i = 1; i < this.samples.length; i++) {
      if (Math.abs(this.samples[i].t - t) < Math.abs(this.samples[best].t - t)) best = i;
    }
    this.hover = best;
    this.draw();
  };

  Chart.prototype.draw = function () {
    var canvas = this.canvas;
    var g = this.geometry();
    if (!g.w || !g.h) return;
    var dpr = window.devicePixelRatio || 1;
    var W = Math.round(g.w * dpr);
    var H = Math.round(g.h * dpr);
    if (canvas.width !== W || canvas.height !== H) { canvas.width = W; canvas.height = H; }
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, g.w, g.h);
    var pw = g.w - g.left - g.right;
    var ph = g.h - g.top - g.bottom;
    var samples = this.samples.filter(function (s) { return s.t >= g.t0; });
    var self = this;
    var max = 0;
    samples.forEach(function (s) {
      self.series.forEach(function (se) { max = Math.max(max, s[se.key] || 0); });
    });
    canvas.dataset.max = String(max);  // the peak shown (the browser tests read it)
    // At most 4 grid steps of a round size: 0, 10, 20, 30 for a peak of 22.
    var top = Math.max(max * 1.05, this.opts.minMax || 4);
    var step = niceStep(top / 4);
    var ticks = Math.max(1, Math.ceil(top / step - 1e-9));
    var ymax = ticks * step;
    var muted = cssVar("--muted");
    var grid = cssVar("--grid");
    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    // horizontal grid with the y labels
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (var i = 0; i <= ticks; i++) {
      var y = g.top + ph - ph * i / ticks;
      ctx.strokeStyle = grid;
      ctx.beginPath(); ctx.moveTo(g.left, Math.round(y) + 0.5); ctx.lineTo(g.left + pw, Math.round(y) + 0.5); ctx.stroke();
      ctx.fillStyle = muted;
      ctx.fillText(compact(step * i), g.left - 6, y);
    }
    // one tick a minute, labelled from the newest sample
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (var m = 0; m <= 5; m++) {
      var x = g.left + pw - pw * m / 5;
      ctx.strokeStyle = grid;
      ctx.beginPath(); ctx.moveTo(Math.round(x) + 0.5, g.top); ctx.lineTo(Math.round(x) + 0.5, g.top + ph); ctx.stroke();
      ctx.fillStyle = muted;
      ctx.textAlign = m === 0 ? "right" : m === 5 ? "left" : "center";
      ctx.fillText(m === 0 ? "now" : "-" + m + "m", x, g.top + ph + 5);
    }
    function X(t) { return g.left + (t - g.t0) / CHART_SPAN_MS * pw; }
    function Y(v) { return g.top + ph - Math.min(v, ymax) / ymax * ph; }
    if (!samples.length) {
      ctx.fillStyle = muted;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("waiting for samples…", g.left + pw / 2, g.top + ph / 2);
    }
    var colors = {};
    this.series.forEach(function (se) {
      var color = cssVar(se.color);
      colors[se.key] = color;
      if (samples.length < 1) return;
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.75;
      ctx.lineJoin = "round";
      ctx.beginPath();
      var prev = null;
      samples.forEach(function (s) {
        var x = X(s.t);
        var y = Y(s[se.key] || 0);
        if (prev === null || s.t - prev > 3500) ctx.moveTo(x, y); else ctx.lineTo(x, y);
        prev = s.t;
      });
      ctx.stroke();
      if (samples.length === 1) {  // one point is no line yet
        ctx.fillStyle = color;
        ctx.beginPath(); ctx.arc(X(samples[0].t), Y(samples[0][se.key] || 0), 2.5, 0, 2 * Math.PI); ctx.fill();
      }
      if (self.opts.fill) {
        ctx.lineTo(X(samples[samples.length - 1].t), Y(0));
        ctx.lineTo(X(samples[0].t), Y(0));
        ctx.closePath();
        ctx.globalAlpha = 0.14;
        ctx.fillStyle = color;
        ctx.fill();
        ctx.globalAlpha = 1;
      }
    });
    Array.prototype.forEach.call(this.swatches, function (sw) {
      sw.style.background = cssVar(sw.getAttribute("data-color"));
    });
    var shown = this.hover !== null ? this.samples[this.hover] : this.samples[this.samples.length - 1];
    if (this.hover !== null && shown) {
      var hx = X(shown.t);
      ctx.strokeStyle = muted;
      ctx.lineWidth = 1;
      ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(hx, g.top); ctx.lineTo(hx, g.top + ph); ctx.stroke();
      ctx.setLineDash([]);
      this.series.forEach(function (se) {
        ctx.fillStyle = colors[se.key];
        ctx.beginPath(); ctx.arc(hx, Y(shown[se.key] || 0), 3, 0, 2 * Math.PI); ctx.fill();
      });
      ctx.fillStyle = muted;
      ctx.textAlign = hx > g.left + pw - 60 ? "right" : "left";
      ctx.textBaseline = "top";
      ctx.fillText(clock(shown.t), hx + (ctx.textAlign === "left" ? 5 : -5), g.top + 2);
    }
    this.series.forEach(function (se) {
      setText(self.values[se.key], shown ? self.opts.format(shown[se.key] || 0) : "–");
      self.values[se.key].dataset.value = shown ? String(shown[se.key] || 0) : "";
    });
  };

  var charts = {};

  function renderRates(r) {
    var samples = (r && r.samples) || [];
    charts.rates.setSamples(samples);
    charts.queued.setSamples(samples);
  }

  // --- a queue and its jobs --------------------------------------------------------

  var queuePause = null;

  function renderQueueHead(q) {
    setPill($("q-paused"), q.paused && q.paused !== "none" ? "warn" : "",
      q.paused && q.paused !== "none" ? "paused " + q.paused : "");
    updatePauseControl(queuePause, q.paused || "none");
    var stats = [
      ["Jobs", num(q.len)], ["Oldest job", q.len ? dur(q.age) : "–"],
      ["In/s", rate(q.rate_in)], ["Out/s", rate(q.rate_out)], ["Ack/s", rate(q.rate_ack)], ["Nack/s", rate(q.rate_nack)],
      ["Added", num(q.added)], ["Removed", num(q.removed)], ["Moved out", num(q.moved_out)], ["Moved in", num(q.moved_in)],
      ["Acked", num(q.acked)], ["Nacked", num(q.nacked)],
      ["Blocked clients", num(q.blocked)]
    ];
    var dl = $("q-stats");
    if (dl.children.length !== stats.length) {
      dl.replaceChildren.apply(dl, stats.map(function (s) { return el("div", null, el("dt", { text: s[0] }), el("dd")); }));
    }
    stats.forEach(function (s, i) { setText(dl.children[i].lastChild, s[1]); });
  }

  var JOB_STATES = { queued: "info", active: "ok", "wait-repl": "warn", acked: "" };

  function bodyPreview(job) {
    if (job.body === null || job.body === undefined) {
      return job.body_base64 !== undefined ? "binary: " + job.body_base64.slice(0, 60) + "…" : "(no body)";
    }
    var text = job.body.replace(/\s+/g, " ");
    return text.length > 120 ? text.slice(0, 120) + "…" : text + (job.body_truncated ? "…" : "");
  }

  function renderQueueView(r) {
    var tbody = $("job-table").tBodies[0];
    if (!r) {
      setPill($("q-paused"), "", "");
      $("q-stats").replaceChildren();
      emptyRow(tbody, 9, "This node holds no queue with this name (an empty queue is forgotten after a while).");
      setText($("q-jobs-summary"), "");
      return;
    }
    var q = r.queue;
    renderQueueHead(q);
    var jobs = r.jobs || [];
    if (!jobs.length) {
      emptyRow(tbody, 9, "No job queued.");
    } else {
      syncRows(tbody, jobs, function (j) { return j.id; }, createJobRow, updateJobRow);
    }
    setText($("q-jobs-summary"), jobs.length < q.len ? "the " + jobs.length + " oldest of " + num(q.len) : "");
  }

  function jobButton(label, cls, title, onClick) {
    var b = el("button", { cls: "btn small job-action " + cls, text: label, attrs: { type: "button" } });
    b.dataset.title = title;
    b.dataset.label = label;
    b.disabled = !state.actions;
    b.title = state.actions ? title : NO_ACTIONS;
    b.addEventListener("click", onClick);
    return b;
  }

  function createJobRow(job) {
    var id = job.id;
    var tr = el("tr");
    tr.dataset.job = id;
    var requeue = jobButton("Requeue", "requeue", "Put the job back in the queue now (ENQUEUE)", function () {
      act("api/jobs/" + enc(id) + "/requeue").then(function () {
        toast("Requeued job " + shortJob(id)); poll();
      }, function (err) { toast("Requeue failed: " + err.message, true); });
    });
    var del = jobButton("Delete", "danger delete", "Acknowledge the job on every node holding it (ACKJOB)", function () {
      if (!del.classList.contains("confirm")) {  // a second tap confirms
        del.classList.add("confirm");
        setText(del, "Confirm");
        setTimeout(function () { del.classList.remove("confirm"); setText(del, "Delete"); }, 4000);
        return;
      }
      act("api/jobs/" + enc(id) + "/delete").then(function () {
        toast("Deleted job " + shortJob(id));
        if (state.job === id) closeJob();
        poll();
      }, function (err) { toast("Delete failed: " + err.message, true); });
    });
    tr.appendChild(el("td", null, el("button", {
      cls: "jobid", text: shortJob(id), title: id, attrs: { type: "button" },
      on: { click: function () { openJob(id); } }
    })));
    tr.appendChild(el("td", null, pill("", "")));
    ["", "num", "num", "", ""].forEach(function (cls) { tr.appendChild(el("td", { cls: cls })); });
    tr.appendChild(el("td", { cls: "preview" }));
    tr.appendChild(el("td", null, el("div", { cls: "btns" }, requeue, del)));
    return tr;
  }

  function updateJobRow(tr, job) {
    var td = tr.children;
    setPill(td[1].firstChild, JOB_STATES[job.state] || "", job.state);
    setText(td[2], dur((nodeTime() - job.ctime / 1e6) / 1000));
    setText(td[3], num(job.nacks));
    setText(td[4], num(job["additional-deliveries"]));
    setText(td[5], dur(job.ttl));
    var rq = job["next-requeue-within"];
    setText(td[6], rq === null || rq === undefined ? "–" : dur(rq / 1000));
    setText(td[7], bodyPreview(job));
    setClass(tr, state.job === job.id ? "selected" : "");
  }

  var JOB_FIELD_NAMES = {
    "next-requeue-within": function (v) { return v === null ? "–" : dur(v / 1000) + " (" + num(v) + " ms)"; },
    "next-awake-within": function (v) { return v === null ? "–" : dur(v / 1000) + " (" + num(v) + " ms)"; },
    ttl: function (v) { return dur(v) + " (" + num(v) + " s)"; },
    ctime: function (v) { return new Date(v / 1e6).toISOString(); },
    delay: function (v) { return num(v) + " s"; },
    retry: function (v) { return num(v) + " s"; }
  };

  function loadJob(id) {
    return api("api/jobs/" + enc(id)).then(function (job) {
      if (state.job === id) renderJob(job);
    }, function (err) {
      if (err.status !== 404 && err.status !== 400) throw err;
      if (state.job === id) renderJob(null, err.message);
    });
  }

  function openJob(id) {
    state.job = id;
    $("job-detail").hidden = false;
    setText($("jd-id"), id);
    $("jd-fields").replaceChildren();
    setText($("jd-body"), "");
    Array.prototype.forEach.call($("job-table").tBodies[0].rows, function (tr) {
      setClass(tr, tr.dataset.job === id ? "selected" : "");
    });
    loadJob(id).catch(function (err) { toast(err.message, true); });
    $("job-detail").scrollIntoView({ behavior: "smooth", block: "nearest" });
  }

  function closeJob() {
    state.job = null;
    $("job-detail").hidden = true;
    Array.prototype.forEach.call($("job-table").tBodies[0].rows, function (tr) { setClass(tr, ""); });
  }

  function renderJob(job, error) {
    var dl = $("jd-fields");
    if (!job) {
      dl.replaceChildren(el("div", null, el("dt", { text: "state" }), el("dd", { text: "gone: " + error })));
      setText($("jd-body"), "");
      return;
    }
    var items = Object.keys(job).filter(function (k) {
      return k !== "id" && k !== "body" && k !== "body_base64" && k !== "body_truncated";
    }).map(function (k) {
      var v = job[k];
      var text = JOB_FIELD_NAMES[k] ? JOB_FIELD_NAMES[k](v) : Array.isArray(v) ? (v.length ? v.map(shortNode).join(", ") : "–") :
        v === null ? "–" : typeof v === "number" ? num(v) : String(v);
      return el("div", null, el("dt", { text: k }), el("dd", { text: text, title: Array.isArray(v) ? v.join("\n") : "" }));
    });
    dl.replaceChildren.apply(dl, items);
    var body = job.body !== null && job.body !== undefined ? job.body :
      job.body_base64 !== undefined ? "(not UTF-8; base64)\n" + job.body_base64 : "(no body)";
    setText($("jd-body"), body.length > 65536 ? body.slice(0, 65536) + "\n… (" + num(body.length) + " characters)" : body);
  }

  // --- views -------------------------------------------------------------------------

  function route() {
    var m = /^#\/queue\/(.*)$/.exec(location.hash);
    var name = null;
    if (m) {
      try { name = decodeURIComponent(m[1]); } catch (e) { name = null; }
    }
    if (name !== null) {
      var changed = state.queue !== name || state.view !== "queue";
      state.view = "queue";
      state.queue = name;
      setText($("q-name"), name);
      if (changed) {
        closeJob();
        $("q-stats").replaceChildren();
        emptyRow($("job-table").tBodies[0], 9, "Loading…");
        setPill($("q-paused"), "", "");
      }
      $("view-overview").hidden = true;
      $("view-queue").hidden = false;
      window.scrollTo(0, 0);
    } else {
      state.view = "overview";
      state.queue = null;
      $("view-queue").hidden = true;
      $("view-overview").hidden = false;
    }
    poll();
  }

  function init() {
    buildQueueHead();
    queuePause = pauseControl(function () { return state.queue; });
    $("q-pause").appendChild(queuePause);
    charts.rates = new Chart($("chart-rates"), $("legend-rates"), [
      { key: "added", label: "added", color: "--added" },
      { key: "removed", label: "removed", color: "--removed" },
      { key: "acked", label: "acked", color: "--acked" },
      { key: "nacked", label: "nacked", color: "--nacked" }
    ], { format: function (v) { return rate(v) + "/s"; } });
    charts.queued = new Chart($("chart-queued"), $("legend-queued"), [
      { key: "queued", label: "queued", color: "--queued" }
    ], { fill: true, minMax: 4, format: num });
    refreshActions();

    var filterTimer = null;
    $("queue-filter").addEventListener("input", function (e) {
      state.filter = e.target.value;
      drawQueues();  // at once on what is shown, then from the node
      clearTimeout(filterTimer);
      filterTimer = setTimeout(poll, 250);
    });
    $("pause-bcast").addEventListener("change", function (e) { state.bcast = e.target.checked; });
    $("jd-close").addEventListener("click", closeJob);
    window.addEventListener("hashchange", route);
    window.addEventListener("resize", function () { charts.rates.draw(); charts.queued.draw(); });
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        clearTimeout(state.timer);
        state.timer = null;
        state.gen++;
        setStatus("idle", "paused while hidden");
      } else {
        poll();
      }
    });
    route();
  }

  init();
}());
