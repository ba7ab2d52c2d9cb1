"""Per-sample token lengths: a converted row formatted with the template, counted, and truncated as LLaMA-Factory's
processors truncate it (``data/processor/supervised.py``, ``pairwise.py``, ``unsupervised.py``, ``feedback.py``,
``pretrain.py``).

`Encoder.process` takes a chunk of rows and returns one `SampleRecord` (as a tuple) per row plus the problems
found, encoding every distinct slot text of the chunk once (one ``encode_batch`` per chunk) and remembering the
counts of short texts that repeat (system prompts, instructions, template constants).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from finetune_doctor.analyzers.data import templates as T
from finetune_doctor.analyzers.data.converter import ConvSpec, RowProblem, _Broken, _why_invalid, convert_row
from finetune_doctor.analyzers.data.dataargs import DataSettings, infer_seqlen
from finetune_doctor.analyzers.data.media import IMAGE, VIDEO, MediaCounter


# flags of a sample record
TRUNCATED, EOS_LOST, EMPTY_TARGET, TURNS_DROPPED, HAS_MEDIA = 1, 2, 4, 8, 16
# a sample whose truncation certainly removes media placeholder tokens (`_finish_sft`): the vision tower still
# encodes every image of the sample, so the model's forward raises on it (rules/multimodal-samples-cut.yaml)
MEDIA_CUT = 32
MEDIA_ASSUMED = 64   # a media size of the sample was assumed (not read): its cut is not certain, never MEDIA_CUT
# status of a sample record
OK, DROPPED, ERROR, UNREADABLE = 0, 1, 2, 3


@dataclass
class SampleRecord:
    """Lengths of one row (tokens). ``*_full`` before truncation, the others after it.

    Pairwise rows: `target*` is max(chosen, rejected), `total` = prompt + that, and `pair` = (chosen total,
    rejected total, chosen labels, rejected labels) after truncation. Pretraining rows: `total_full` is the document with its EOS.
    """

    index: int
    line: int | None
    status: int
    source_full: int = 0
    target_full: int = 0
    total_full: int = 0
    source: int = 0
    target: int = 0
    total: int = 0
    labels: int = 0
    flags: int = 0
    pair: tuple[int, int, int, int] | None = None

    def as_tuple(self) -> tuple:
        return (self.index, self.line, self.status, self.source_full, self.target_full, self.total_full,
                self.source, self.target, self.total, self.labels, self.flags, self.pair)


_CACHE_CHARS = 4096       # slot texts up to this length are remembered with their token count
_CACHE_MAX = 20_000       # entries before the cache starts over (~3 MB: keys are hashes, not the texts)


class _Texts:
    """Slot texts of one chunk: each distinct text once (`unique`), and one reference per slot (`refs`)."""

    __slots__ = ("unique", "refs", "_index")

    def __init__(self) -> None:
        self.unique: list[str] = []
        self.refs: list[int] = []
        self._index: dict[str, int] = {}

    def add(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.unique)
            self.unique.append(s)
        self.refs.append(i)
        return len(self.refs) - 1

    def known(self, s: str, cache: dict[tuple[int, int], int]) -> int:
        """The token count of slot text `s` when `cache` knows it (template constants, repeated slot texts), else
        0 with `s` queued for encoding; an empty text counts 0 and is not queued. The one step both slot walks
        of `Encoder` (`_collect`'s and `_collect_plain`'s) take per text."""
        if not s:
            return 0
        n = cache.get((hash(s), len(s)))
        if n is None:
            self.add(s)
            return 0
        return n


class Encoder:
    """Turns rows into `SampleRecord` lengths for one template, tokenizer and set of data arguments."""

    def __init__(self, counter: Any, template: T.Template, settings: DataSettings,
                 media: MediaCounter | None = None):
        self.counter = counter
        self.media = media
        self.t = template
        self.s = settings
        self.cutoff = settings.effective_cutoff
        self.processor = settings.processor
        self.bos_n = 1 if counter.has_bos else 0
        self.eos_n = 1 if counter.has_eos else 0
        self.const: dict[str, int] = {}
        for slots in (template.user, template.assistant_slots, template.system_slots, template.observation_slots,
                      template.function_slots, template.prefix):
            for s in slots:
                if isinstance(s, str) and T.CONTENT not in s and "{{idx}}" not in s:
                    self.const[s] = counter.length(s)
        self.thought_n = counter.length(T.empty_thought(template)) if template.kind == "reasoning" else 0
        # token counts of strings seen before: template constants, and (bounded) any slot text, because system
        # prompts, tool lists and instructions repeat across samples and LF would encode them every time. Keyed
        # by (hash, length) so that the texts themselves are not kept alive.
        self.cache: dict[tuple[int, int], int] = {}
        self._seed_cache()
        tail = T.eos_tail_slots(template, counter.eos)
        self.eos_tail = None if tail is None else sum(self._slot_fixed(s) for s in tail)
        self.no_eos = tail is None and not template.efficient_eos
        self._roles = self._role_forms(template)

    def _role_forms(self, t: T.Template) -> dict[str, tuple[int, tuple[tuple[str, str], ...]]] | None:
        """Per role (prefix, system, user, assistant): the token count of its constant slots and the
        (text before, text after) of each slot that takes the content — what ``message_slots`` builds for a
        ``plain`` template, precomputed so that a row costs one concatenation per content slot.

        A tail after the content that the tokenizer provably encodes apart (`ExactCounter.separate_suffix`,
        e.g. ChatML's ``<|im_end|>\n``) joins the constant count: only ``before + content`` is encoded per sample.
        None (every row takes the general `T.plan_multiturn` path) for llama2/reasoning templates and for
        templates with ``{{idx}}`` slots or content in the prefix.
        """
        if t.kind != "plain":
            return None
        out: dict[str, tuple[int, tuple[tuple[str, str], ...]]] = {}
        for role, slots in (("prefix", t.prefix), ("system", t.system_slots), ("user", t.user),
                            ("assistant", t.assistant_slots)):
            fixed, parts = 0, []
            for s in slots:
                if isinstance(s, str):
                    if "{{idx}}" in s:
                        return None
                    if T.CONTENT in s:
                        if role == "prefix":
                            return None
                        a, b = s.split(T.CONTENT, 1)
                        if b and T.CONTENT not in b and getattr(self.counter, "separate_suffix", None) and \
                                self.counter.separate_suffix(b):
                            # the tail after the content (e.g. "<|im_end|>\n") is counted once, not per sample
                            fixed += self.counter.length(b)
                            b = ""
                        parts.append((a, b))
                        continue
                fixed += self._slot_fixed(s)
            out[role] = (fixed, tuple(parts))
        return out

    def _seed_cache(self) -> None:
        self.cache.clear()
        self.cache.update({(hash(k), len(k)): v for k, v in self.const.items()})

    def _slot_fixed(self, s: Any) -> int:
        if isinstance(s, str):
            return self.const.get(s) if s in self.const else self.counter.length(s)
        if s == T.BOS:
            return self.bos_n
        if s == T.EOS:
            return self.eos_n
        if isinstance(s, tuple) and s and s[0] == "token":
            return 1
        return 0  # a set naming neither bos_token nor eos_token

    # -- chunk processing ------------------------------------------------------------------------------------------

    def process(self, rows: Sequence[dict[str, Any] | None], first_index: int, lines: Sequence[int | None],
                cs: ConvSpec) -> tuple[list[tuple], list[tuple]]:
        """Records (as tuples) and problems ``(kind, index, line, message, fatal)`` for one chunk of rows."""
        records: list[SampleRecord] = []
        problems: list[tuple] = []
        jobs: list[tuple[SampleRecord, Any, list[int]]] = []  # (record, plan, media tokens per message)
        texts = _Texts()
        for i, row in enumerate(rows):
            rec = SampleRecord(first_index + i, lines[i] if i < len(lines) else None, OK)
            records.append(rec)
            if row is None:
                rec.status = UNREADABLE
                continue
            try:
                plan, extra = self._plan(row, cs, rec, problems)
            except RowProblem as p:
                rec.status = ERROR if p.fatal else DROPPED
                problems.append((p.kind, rec.index, rec.line, p.message, p.fatal))
                continue
            except _Broken as b:
                rec.status = DROPPED
                kind = "wrong_role_order" if "role" in b.reason else "odd_message_count"
                problems.append((kind, rec.index, rec.line, b.reason, False))
                continue
            except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as err:
                # a value of a shape LF's converter or template cannot take (LF fails on the row too)
                rec.status = ERROR
                problems.append(("bad_value", rec.index, rec.line, f"{type(err).__name__}: {err}"[:300], True))
                continue
            if plan is None:
                continue
            jobs.append((rec, self._collect(plan, texts), extra))
        ulens = self.counter.lengths(texts.unique)
        cache = self.cache
        if len(cache) > _CACHE_MAX:
            self._seed_cache()
        for text, n in zip(texts.unique, ulens):
            if len(text) <= _CACHE_CHARS:
                cache[(hash(text), len(text))] = n
        lens = [ulens[i] for i in texts.refs]
        for rec, items, extra in jobs:
            self._finish(rec, items, lens, extra)
        return [r.as_tuple() for r in records], problems

    def _plan(self, row: dict[str, Any], cs: ConvSpec, rec: SampleRecord, problems: list[tuple]) -> Any:
        """(plan, media tokens per message of prompt + response) of one row."""
        prompt, response, system, tools, media = convert_row(row, cs)
        extra: list[int] = []
        if media:
            rec.flags |= HAS_MEDIA
            if self.media is not None:
                prompt, response, extra = self._media(row, cs, prompt, response, rec, problems)
        return self._plan_text(prompt, response, system, tools, cs), extra

    def _media(self, row: dict[str, Any], cs: ConvSpec, prompt: list[dict], response: list[dict],
               rec: SampleRecord, problems: list[tuple]) -> tuple[list[dict], list[dict], list[int]]:
        """Each ``<image>``/``<video>`` placeholder replaced by nothing in the text and by its media tokens in the
        message's count (LF's Qwen-VL plugins expand it into special tokens, which the tokenizer never merges with
        the text around them). LF raises when the placeholders and the media differ in number (mm_plugin.py
        ``_validate_messages``): a fatal ``bad_value`` here. What was assumed is a non-fatal ``media_assumed``."""
        def items(role: str) -> list[Any]:
            col = cs.columns.get(role)
            v = row.get(col) if col else None
            return [] if not v else (v if isinstance(v, list) else [v])

        images, videos = items("images"), items("videos")
        msgs = prompt + response
        n_img = sum(m["content"].count(IMAGE) for m in msgs)
        n_vid = sum(m["content"].count(VIDEO) for m in msgs)
        if n_img != len(images) or n_vid != len(videos):
            what = "images" if n_img != len(images) else "videos"
            raise RowProblem("bad_value", f"{len(images) if what == 'images' else len(videos)} {what} but "
                             f"{n_img if what == 'images' else n_vid} {IMAGE if what == 'images' else VIDEO} "
                             f"placeholders: LLaMA-Factory raises 'The number of {what} does not match'", fatal=True)
        img, vid, notes = self.media.sample(images, videos)
        for why in notes[:1]:
            problems.append(("media_assumed", rec.index, rec.line, why, False))
            rec.flags |= MEDIA_ASSUMED
        for why in self.media.too_large[:1]:
            problems.append(("bad_value", rec.index, rec.line, why, True))
        extra, i, j, out = [], 0, 0, []
        for m in msgs:
            c = m["content"]
            a, b = c.count(IMAGE), c.count(VIDEO)
            extra.append(sum(img[i:i + a]) + sum(n for n, _ in vid[j:j + b]))
            if b:   # Qwen3-VL's per-group "<t seconds>" text stays text: the tokenizer counts it
                parts = c.split(VIDEO)
                c = parts[0] + "".join(vid[j + k][1] + parts[k + 1] for k in range(b))
            i, j = i + a, j + b
            out.append({**m, "content": c.replace(IMAGE, "")} if a or b else m)
        return out[:len(prompt)], out[len(prompt):], extra

    def _plan_text(self, prompt: list[dict], response: list[dict], system: str, tools: str, cs: ConvSpec) -> Any:
        p = self.processor
        if p.startswith("pretrain"):
            if not prompt:
                raise RowProblem("empty_prompt", "no text: LLaMA-Factory's pretraining processor fails on it",
                                 fatal=True)
            # pretrain.py: llama3 appends "<|end_of_text|>" (its base-model EOS), others the tokenizer's EOS text
            eos = "<|end_of_text|>" if self.s.template == "llama3" else (self.counter.eos or "")
            return ("pt", prompt[0]["content"] + eos)
        if p in ("supervised", "packed_supervised"):
            if len(prompt) % 2 != 1 or len(response) != 1:
                raise RowProblem(*_why_invalid(prompt, response, cs, want=1))
            if self._roles is not None and not tools:
                return ("sft_plain", prompt + response, system)
            disc = self.s.mask_history and not self.t.preserve_thinking
            return ("sft", T.plan_multiturn(self.t, prompt + response, system, tools, disc))
        if p == "pairwise":
            if len(prompt) % 2 != 1 or len(response) < 2:
                raise RowProblem(*_why_invalid(prompt, response, cs, want=2))
            return ("pair", T.plan_oneturn(self.t, prompt + [response[0]], system, tools),
                    T.plan_oneturn(self.t, prompt + [response[1]], system, tools))
        if p == "feedback":
            if len(prompt) % 2 != 1 or len(response) < 2:
                raise RowProblem(*_why_invalid(prompt, response, cs, want=2))
            msg = response[0] if response[0]["content"] else response[1]
            return ("one", T.plan_oneturn(self.t, prompt + [msg], system, tools))
        if len(prompt) % 2 != 1:
            raise RowProblem(*_why_invalid(prompt, response, cs, want=0))
        msgs = prompt + response if len(response) == 1 else prompt + [{"role": "assistant", "content": ""}]
        return ("one", T.plan_oneturn(self.t, msgs, system, tools))

    def _collect(self, plan: Any, texts: "_Texts") -> Any:
        """Replace each message's slots with (fixed token count, first ref, end ref) into `texts`."""
        if plan[0] == "pt":
            return ("pt", (0, texts.add(plan[1]), len(texts.refs)))
        cache = self.cache
        if plan[0] == "sft_plain":
            out = self._collect_plain(plan[1], plan[2], texts)
            if out is not None:
                return out
            disc = self.s.mask_history and not self.t.preserve_thinking
            plan = ("sft", T.plan_multiturn(self.t, plan[1], plan[2], "", disc))

        known = texts.known

        def msgs(p: T.EncodePlan, only_last: bool = False) -> list[tuple[int, int, int]]:
            out = []
            seq = p.messages[-1:] if only_last else p.messages
            for slots in seq:
                fixed, start = 0, len(texts.refs)
                for s in slots:
                    fixed += known(s, cache) if isinstance(s, str) else self._slot_fixed(s)
                out.append((fixed, start, len(texts.refs)))
            return out

        if plan[0] == "sft":
            return ("sft", msgs(plan[1]), plan[1].extra_prompt, plan[1].extra_response)
        if plan[0] == "pair":
            return ("pair", msgs(plan[1]), plan[1].extra_prompt, plan[1].extra_response,
                    msgs(plan[2], only_last=True), plan[2].extra_response)
        return ("one", msgs(plan[1]), plan[1].extra_prompt, plan[1].extra_response)

    def _collect_plain(self, messages: list[dict[str, str]], system: str, texts: "_Texts") -> Any:
        """`_collect` of ``plan_multiturn`` for a ``plain`` template and a row without tools, from the slot
        forms of `_role_forms`: the same texts per message (order within a message does not matter to a sum), without
        building slot lists. None when a message needs the general path (observation/function roles)."""
        roles = self._roles
        cache = self.cache
        refs = texts.refs
        known = texts.known
        out = []
        system = system or self.t.default_system
        for m in messages:
            role = m["role"]
            if (role != "user" and role != "assistant") or (role == "user" and "{{idx}}" in m["content"]):
                return None  # LF's StringFormatter also substitutes an {{idx}} that the content brings
        for i, m in enumerate(messages):
            role, content = m["role"], m["content"]
            fixed, start = 0, len(refs)
            pieces = [(roles[role], content)]
            if i == 0:
                pieces.append((roles["prefix"], ""))
                if system:
                    pieces.append((roles["system"], system))
            for (fx, parts), c in pieces:
                fixed += fx
                for a, b in parts:
                    fixed += known(a + c + b, cache)
            out.append((fixed, start, len(refs)))
        return ("sft", out, {}, {})

    def _finish(self, rec: SampleRecord, items: Any, lens: list[int], extra: list[int] = ()) -> None:
        """Token counts of one planned row; `extra[k]` media tokens join message k (prompt + response order)."""
        def L(m: tuple[int, int, int]) -> int:
            fixed, a, b = m
            return fixed + (sum(lens[a:b]) if b > a else 0)

        def add(ml: list[int], first: int = 0) -> list[int]:
            return [n + (extra[first + k] if first + k < len(extra) else 0) for k, n in enumerate(ml)]

        kind = items[0]
        if kind == "pt":
            self._finish_pt(rec, L(items[1]) + sum(extra))
        elif kind == "sft":
            ml = add([L(m) for m in items[1]])
            pairs = []
            for k in range(0, len(ml), 2):
                s, t = ml[k], ml[k + 1]
                s += self.thought_n * items[2].get(k // 2, 0)
                t += self.thought_n * items[3].get(k // 2, 0)
                pairs.append((s, t))
            media = [(extra[k] if k < len(extra) else 0, extra[k + 1] if k + 1 < len(extra) else 0)
                     for k in range(0, len(ml), 2)]
            self._finish_sft(rec, pairs, media)
        elif kind == "pair":
            ml = add([L(m) for m in items[1]])
            prompt = sum(ml[:-1]) + self.thought_n * items[2].get(0, 0)
            chosen = ml[-1] + self.thought_n * items[3].get(0, 0)
            rejected = add([L(items[4][0])], len(ml))[0] + self.thought_n * items[5].get(0, 0)
            self._finish_pair(rec, prompt, chosen, rejected)
        else:
            ml = add([L(m) for m in items[1]])
            prompt = sum(ml[:-1]) + self.thought_n * items[2].get(0, 0)
            resp = ml[-1] + self.thought_n * items[3].get(0, 0)
            self._finish_one(rec, prompt, resp)

    def _lost_eos(self, full: int, kept: int) -> bool:
        return self.eos_tail is not None and full - kept > self.eos_tail

    def _finish_sft(self, rec: SampleRecord, pairs: list[tuple[int, int]],
                    media: Sequence[tuple[int, int]] = ()) -> None:
        """``SupervisedDatasetProcessor._encode_data_example`` on lengths (supervised.py:50-104). `media[k]` is the
        media placeholder tokens in turn k's (source, target). LF expands the placeholders before it truncates
        (mm_plugin ``process_messages`` first, then ``infer_seqlen``): a turn kept shorter than its media tokens,
        or a dropped turn that holds media, loses placeholders for certain -- MEDIA_CUT. (A cut that falls after
        an image's placeholders leaves them whole; where it falls is not known, so only certain cuts count.)"""
        s, t = self.s, self.t
        eff = t.efficient_eos
        total = 1 if eff else 0
        order = pairs[::-1] if s.mask_history else pairs
        mord = list(media[::-1] if s.mask_history else media)
        src = tgt = labels = 0
        kept = 0
        for turn, (sl, tl) in enumerate(order):
            if total >= self.cutoff:
                break
            ns, nt = infer_seqlen(sl, tl, self.cutoff - total)
            total += ns + nt
            src += ns
            tgt += nt
            kept += 1
            if s.train_on_prompt:
                labels += ns
            elif eff and turn != 0:
                labels += 1  # [eos] + [IGNORE] * (ns - 1): one label even when ns == 0
            if not (s.mask_history and turn != 0):
                labels += nt
            if ns < sl or nt < tl:
                rec.flags |= TRUNCATED
                if nt < tl and not eff and self._lost_eos(tl, nt):
                    rec.flags |= EOS_LOST
                ms, mt = mord[turn] if turn < len(mord) else (0, 0)
                if (ns < ms or nt < mt) and not rec.flags & MEDIA_ASSUMED:
                    rec.flags |= MEDIA_CUT
        if eff:
            labels += 1
        if kept < len(pairs):
            rec.flags |= TRUNCATED | TURNS_DROPPED
            if any(sum(m) for m in mord[kept:]) and not rec.flags & MEDIA_ASSUMED:
                rec.flags |= MEDIA_CUT
        rec.source_full = sum(p[0] for p in pairs)
        rec.target_full = sum(p[1] for p in pairs)
        rec.total_full = rec.source_full + rec.target_full + (1 if eff else 0)
        rec.source, rec.target, rec.total, rec.labels = src, tgt, total, labels
        if labels == 0:
            rec.flags |= EMPTY_TARGET

    def _finish_pair(self, rec: SampleRecord, prompt: int, chosen: int, rejected: int) -> None:
        """``PairwiseDatasetProcessor._encode_data_example`` (pairwise.py:30-70): EOS joins each response
        before truncation (efficient_eos), the prompt is cut against max(chosen, rejected)."""
        if self.t.efficient_eos:
            chosen += 1
            rejected += 1
        longest = max(chosen, rejected)
        ns, nt = infer_seqlen(prompt, longest, self.cutoff)
        kc, kr = min(chosen, nt), min(rejected, nt)
        rec.source_full, rec.target_full, rec.total_full = prompt, longest, prompt + longest
        rec.source, rec.target, rec.total = ns, max(kc, kr), ns + max(kc, kr)
        rec.pair = (ns + kc, ns + kr, kc, kr)
        rec.labels = min(kc, kr)
        if ns < prompt or nt < longest:
            rec.flags |= TRUNCATED
            tail = 0 if self.t.efficient_eos else self.eos_tail
            if tail is not None and (chosen - kc > tail or rejected - kr > tail):
                rec.flags |= EOS_LOST
        if kc == 0 or kr == 0:
            rec.flags |= EMPTY_TARGET

    def _finish_one(self, rec: SampleRecord, prompt: int, resp: int) -> None:
        """Unsupervised (ppo) and feedback (kto) processors: one infer_seqlen over prompt and response."""
        if self.t.efficient_eos:
            resp += 1
        ns, nt = infer_seqlen(prompt, resp, self.cutoff)
        rec.source_full, rec.target_full, rec.total_full = prompt, resp, prompt + resp
        rec.source, rec.target, rec.total, rec.labels = ns, nt, ns + nt, nt
        if ns < prompt or nt < resp:
            rec.flags |= TRUNCATED
        if nt == 0 and self.processor == "feedback":
            rec.flags |= EMPTY_TARGET

    def _finish_pt(self, rec: SampleRecord, n: int) -> None:
        """``PretrainDatasetProcessor`` (pretrain.py): text + EOS; without packing BOS text is prepended when the
        tokenizer adds BOS and the result is truncated at cutoff_len; with packing documents are concatenated
        (blocks are cut in `Aggregate`)."""
        if self.processor == "pretrain" and self.counter.add_bos_token and self.counter.has_bos:
            n += 1
        rec.source_full = rec.source = 0
        rec.target_full = rec.total_full = n
        if self.processor == "pretrain":
            rec.total = rec.target = rec.labels = min(n, self.cutoff)
            if n > self.cutoff:
                rec.flags |= TRUNCATED | EOS_LOST
        else:
            rec.total = rec.target = rec.labels = n
