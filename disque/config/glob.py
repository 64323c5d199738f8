"""Redis glob matching (``stringmatchlen``), for CONFIG GET's pattern and
the ACL's queue patterns (``~orders:*``).  Pure and case-sensitive."""


def stringmatch(pattern: bytes, string: bytes) -> bool:
    """Redis glob matching (case-sensitive): * ? [abc] [^a] [a-z] and \\ escapes."""
    p, i, plen, slen = 0, 0, len(pattern), len(string)
    while p < plen and i < slen:
        c = pattern[p]
        if c == 42:                                       # '*'
            while p + 1 < plen and pattern[p + 1] == 42:
                p += 1
            if p + 1 == plen:
                return True
            return any(stringmatch(pattern[p + 1:], string[k:]) for k in range(i, slen))
        if c == 91:                                       # '['
            p += 1
            negate = p < plen and pattern[p] == 94
            p += negate
            hit = False
            while True:
                if p + 1 < plen and pattern[p] == 92:
                    p += 1
                    hit |= pattern[p] == string[i]
                elif p < plen and pattern[p] == 93:
                    break
                elif p >= plen:                           # unterminated: ends the pattern
                    p -= 1
                    break
                elif p + 2 < plen and pattern[p + 1] == 45:
                    lo, hi = sorted((pattern[p], pattern[p + 2]))
                    hit |= lo <= string[i] <= hi
                    p += 2
                else:
                    hit |= pattern[p] == string[i]
                p += 1
            if hit == negate:
                return False
        elif c != 63:                                     # not '?': literal, maybe escaped
            if c == 92 and p + 1 < plen:
                p += 1
            if pattern[p] != string[i]:
                return False
        p += 1
        i += 1
        if i == slen:
            while p < plen and pattern[p] == 42:
                p += 1
    return p == plen and i == slen
