"""A full-depth allocation trace made from the simulate probe's traces at k and k+1 decoder layers.

The caching allocator's reserved memory is not affine in depth (a large freed block, the fp32 logits say, absorbs
the first layers' tensors and stops doing so at some depth), so the replay does not extrapolate its results;
it replays the repeated-layer pattern instead. The k+1 trace holds one layer more than the k trace: aligning the
two, segment by segment of the step (the probe's markers), every run of events present only at k+1 is that
layer's pattern (its weights at the build, its LoRA and fp32 copies, its forward and backward tensors, its
optimizer states), and it is repeated L − k − 1 more times in place. A request whose size differs between the two
traces (a buffer of all parameters, say) is extrapolated affinely to L layers.

Frees are remapped so every copy behaves as one more layer: a copy frees its own tensors (those of the same copy
in the forward when it runs the backward); a tensor the layer hands to the next layer (its output in the forward,
its input gradient in the backward: allocated in the layer, freed after it) is freed by the next copy, and the
last copy's by the code after the layers; a tensor of the layer freed far later (weights, gradients at
``zero_grad``) is freed there for every copy.
"""

from __future__ import annotations

import difflib
from typing import Any

from finetune_doctor.probes.trace import AllocTrace


def _split(events: tuple[tuple, ...]) -> list[tuple[Any, list[tuple]]]:
    """[(label, events)] with the build as label "setup"; markers start segments."""
    out: list[tuple[Any, list[tuple]]] = [("setup", [])]
    for e in events:
        if e[0] == "m":
            out.append((e[1], []))
        else:
            out[-1][1].append(e)
    return out


def _tokens(seg: list[tuple], sizes: dict[int, int]) -> list[tuple]:
    return [("a", e[2]) if e[0] == "a" else ("f", sizes.get(e[1], -1)) for e in seg]


def _pair_segments(sa: list, sb: list) -> list[tuple[int | None, int]]:
    """For each segment of B, the index of its counterpart in A (None: only in B, an extra layer's segment)."""
    out, i = [], 0
    for j, (label, _) in enumerate(sb):
        k = i
        while k < len(sa) and sa[k][0] != label:
            k += 1
        if k < len(sa) and (k - i) <= 2:
            out.append((k, j))
            i = k + 1
        else:
            out.append((None, j))
    return out


def synthesize(a: AllocTrace, b: AllocTrace, num_layers: int) -> AllocTrace:
    """The trace of `num_layers` layers from traces `a` (k layers) and `b` (k+1 layers). Raises ValueError when
    the depths are not k and k+1 or `num_layers` is below k+1."""
    k = a.n_layers
    if b.n_layers != k + 1 or num_layers < k + 1:
        raise ValueError(f"need traces at k and k+1 layers and a depth of at least k+1, got {a.n_layers}, "
                         f"{b.n_layers} and {num_layers}")
    extra = num_layers - k - 1
    if extra == 0:
        return AllocTrace(b.events, num_layers)
    size_a = {e[1]: e[2] for e in a.events if e[0] == "a"}
    size_b = {e[1]: e[2] for e in b.events if e[0] == "a"}
    sa, sb = _split(a.events), _split(b.events)
    # per event of B: "keep", "copy" (part of the repeated layer) or a new size (depth-dependent request)
    role: list[Any] = []
    flat_b: list[tuple] = []
    for ia, jb in _pair_segments(sa, sb):
        seg_b = sb[jb][1]
        if jb:
            flat_b.append(("m", sb[jb][0]))
            role.append("keep")
        if ia is None:
            flat_b += seg_b
            role += ["copy"] * len(seg_b)
            continue
        seg_a = sa[ia][1]
        roles = ["keep"] * len(seg_b)
        sm = difflib.SequenceMatcher(None, _tokens(seg_a, size_a), _tokens(seg_b, size_b), autojunk=False)
        for op, a0, a1, b0, b1 in sm.get_opcodes():
            if op == "insert":
                roles[b0:b1] = ["copy"] * (b1 - b0)
            elif op == "replace" and a1 - a0 == b1 - b0:
                for x, y in zip(range(a0, a1), range(b0, b1)):
                    ea, eb = seg_a[x], seg_b[y]
                    if ea[0] == "a" and eb[0] == "a":
                        roles[y] = max(int(ea[2] + (num_layers - k) * (eb[2] - ea[2])), 0)
            elif op == "replace":
                roles[b0 + (a1 - a0):b1] = ["copy"] * max(0, (b1 - b0) - (a1 - a0))
        flat_b += seg_b
        role += roles
    return AllocTrace(tuple(_emit(flat_b, role, extra)), num_layers)


def _chunks(role: list[Any]) -> list[tuple[int, int]]:
    out, i = [], 0
    while i < len(role):
        if role[i] == "copy":
            j = i
            while j < len(role) and role[j] == "copy":
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _emit(flat: list[tuple], role: list[Any], extra: int) -> list[tuple]:
    chunks = _chunks(role)
    in_chunk = {}
    for c, (i, j) in enumerate(chunks):
        for p in range(i, j):
            if flat[p][0] == "a":
                in_chunk[flat[p][1]] = c
    free_pos = {e[1]: p for p, e in enumerate(flat) if e[0] == "f"}
    size = {e[1]: e[2] for e in flat if e[0] == "a"}
    # hand-offs: a chunk's free of a tensor from before it, paired (by size, in order) with a tensor of the chunk
    # freed after it outside every chunk
    handoff: dict[tuple[int, int], int] = {}      # (chunk, serial freed in it) -> serial of the chunk handed on
    handed: set[int] = set()
    for c, (i, j) in enumerate(chunks):
        outs = [e[1] for e in flat[i:j] if e[0] == "f" and e[1] not in in_chunk and e[1] in size]
        ins = [e[1] for e in flat[i:j] if e[0] == "a" and free_pos.get(e[1], -1) >= j
               and in_chunk.get(e[1]) == c and not _freed_in_chunk(free_pos[e[1]], chunks)]
        for s_out in outs:
            match = next((s for s in ins if size[s] == size[s_out] and s not in handed), None)
            if match is not None:
                handoff[(c, s_out)] = match
                handed.add(match)
    serial = max(size, default=0)
    maps: list[dict[int, int]] = [dict() for _ in range(extra + 1)]   # copy j: serial in B -> serial of copy j
    out: list[tuple] = []
    starts = {i: (c, j) for c, (i, j) in enumerate(chunks)}
    p = 0
    while p < len(flat):
        if p in starts:
            c, end = starts[p]
            out += flat[p:end]
            for copy in range(1, extra + 1):
                for e in flat[p:end]:
                    if e[0] == "a":
                        serial += 1
                        maps[copy][e[1]] = serial
                        out.append(("a", serial, e[2], e[3]))
                    elif e[0] == "f":
                        if e[1] in maps[copy]:
                            out.append(("f", maps[copy][e[1]]))
                        elif (c, e[1]) in handoff:
                            s_in = handoff[(c, e[1])]
                            out.append(("f", s_in if copy == 1 else maps[copy - 1][s_in]))
                    else:
                        out.append(e)
            p = end
            continue
        e, r = flat[p], role[p]
        if e[0] == "a" and isinstance(r, int):
            out.append(("a", e[1], r, e[3]))
        elif e[0] == "f" and e[1] in in_chunk:
            if e[1] in handed:
                out.append(("f", maps[extra][e[1]]))
            else:
                out.append(e)
                out += [("f", maps[j][e[1]]) for j in range(1, extra + 1) if e[1] in maps[j]]
        else:
            out.append(e)
        p += 1
    return out


def _freed_in_chunk(pos: int, chunks: list[tuple[int, int]]) -> bool:
    return any(i <= pos < j for i, j in chunks)
