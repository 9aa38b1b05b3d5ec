"""Which layers each (pipeline stage, virtual chunk) holds, following Megatron-Core.

Megatron-Core numbers the ``pp * vp`` model chunks in *model-chunk order* ``i = v * pp + r``: chunk
``i`` lives on pipeline rank ``i % pp`` as virtual chunk ``i // pp``, and a microbatch visits the
chunks in that order (rank 0 → … → rank pp-1 → rank 0 again for the next virtual stage). Decoder
layers are assigned contiguously in that order (``get_transformer_layer_offset``), so "which layers
does rank r hold" and "what does a microbatch cross" both follow from one tuple of chunks.

Four ways to split, mirroring Megatron's ``TransformerConfig`` (exactly one may be used):

* even split: every chunk gets ``num_layers / (pp * vp)`` decoder layers;
* uneven first/last stage (``num_layers_in_first/last_pipeline_stage``);
* ``account_for_embedding/loss_in_pipeline_split``: the embedding/loss count as one layer each;
* an explicit ``pipeline_model_parallel_layout`` string such as ``"Et*3|(tt|)*29,m|L"``.

Memory (the ledger) and time (the projection) must agree on this placement, which is why it lives
here, next to the schedule that orders the chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Final, NoReturn

from primus.errors import InputError

#: One item of a chunk: ``"E"`` embedding, ``("t", i)`` decoder layer i (0-based, global),
#: ``("m", k)`` MTP layer k, ``"L"`` output layer + loss.
Item = str | tuple[str, int]

LAYOUT_FIELD: Final = "pipeline_model_parallel_layout"
MAX_LAYOUT_CHARS: Final = 10_000
MAX_LAYOUT_SYMBOLS: Final = 100_000
_MAX_REPEAT_DIGITS: Final = 9
_SYMBOLS: Final = frozenset("ELtm|")
_SPLIT_OPTIONS: Final = (
    "set decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers, "
    "account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split, "
    "or an explicit pipeline_model_parallel_layout"
)


@dataclass(frozen=True)
class PipelineLayout:
    """The items of every model chunk, indexed by model-chunk order ``i = v * pp + r``."""

    pp: int
    vp: int
    chunks: tuple[tuple[Item, ...], ...]

    def __post_init__(self) -> None:
        if self.pp < 1 or self.vp < 1 or len(self.chunks) != self.pp * self.vp:
            raise ValueError(f"PipelineLayout needs pp*vp={self.pp * self.vp} chunks, got {len(self.chunks)}")

    @property
    def num_chunks(self) -> int:
        return self.pp * self.vp

    def chunk_rank(self, chunk: int) -> int:
        """The pipeline rank that holds model chunk ``chunk`` (Megatron's interleaved assignment)."""
        return chunk % self.pp

    def chunk_virtual_stage(self, chunk: int) -> int:
        """The virtual stage (``vp_stage``) of model chunk ``chunk`` on its rank."""
        return chunk // self.pp

    def stage_chunks(self, rank: int) -> tuple[int, ...]:
        """Model-chunk indices held by ``rank``, in virtual-stage order."""
        self._check_rank(rank)
        return tuple(v * self.pp + rank for v in range(self.vp))

    def decoder_layers(self, chunk: int) -> tuple[int, ...]:
        """Global decoder-layer indices in ``chunk``, in execution order."""
        return self._indices[chunk][0]

    def mtp_layers(self, chunk: int) -> tuple[int, ...]:
        """MTP-layer indices in ``chunk``."""
        return self._indices[chunk][1]

    def has_embedding(self, rank: int) -> bool:
        return any("E" in self.chunks[c] for c in self.stage_chunks(rank))

    def has_loss(self, rank: int) -> bool:
        return any("L" in self.chunks[c] for c in self.stage_chunks(rank))

    def num_decoder_layers_on(self, rank: int) -> int:
        return sum(len(self.decoder_layers(c)) for c in self.stage_chunks(rank))

    def mtp_layers_on(self, rank: int) -> tuple[int, ...]:
        return tuple(k for c in self.stage_chunks(rank) for k in self.mtp_layers(c))

    @property
    def num_layers(self) -> int:
        return sum(len(d) for d, _ in self._indices)

    @property
    def mtp_num_layers(self) -> int:
        return sum(len(m) for _, m in self._indices)

    def layout_string(self) -> str:
        """The equivalent Megatron ``pipeline_model_parallel_layout`` (runs of t/m as ``t*n``)."""
        parts = []
        for chunk in self.chunks:
            symbols = "".join(item if isinstance(item, str) else item[0] for item in chunk)
            parts.append(_run_length(symbols))
        return "|".join(parts)

    @cached_property
    def _indices(self) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
        out = []
        for chunk in self.chunks:
            dec = tuple(item[1] for item in chunk if isinstance(item, tuple) and item[0] == "t")
            mtp = tuple(item[1] for item in chunk if isinstance(item, tuple) and item[0] == "m")
            out.append((dec, mtp))
        return tuple(out)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.pp:
            raise ValueError(f"rank {rank} outside 0..{self.pp - 1}")


def _run_length(symbols: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(symbols):
        j = i
        while j < len(symbols) and symbols[j] == symbols[i]:
            j += 1
        n = j - i
        out.append(symbols[i] if n == 1 else f"{symbols[i]}*{n}")
        i = j
    return "".join(out)


def build_layout(
    num_layers: int,
    pp: int,
    vp: int,
    *,
    mtp_num_layers: int = 0,
    decoder_first_pipeline_num_layers: int | None = None,
    decoder_last_pipeline_num_layers: int | None = None,
    account_for_embedding_in_pipeline_split: bool = False,
    account_for_loss_in_pipeline_split: bool = False,
    layout: str | None = None,
    where: str = "pipeline",
) -> PipelineLayout:
    """Place embedding, decoder layers, MTP layers and loss on the ``pp * vp`` model chunks.

    Semantics follow Megatron-Core ``TransformerConfig.__post_init__`` validation together with
    ``get_num_layers_to_build`` / ``get_transformer_layer_offset``:

    * layers are contiguous in model-chunk order ``i = v * pp + r``;
    * the embedding is on chunk 0 (rank 0, virtual stage 0) and the output layer + loss on the last
      chunk (rank pp-1, last virtual stage); without an explicit layout the MTP block is built with
      the loss (Megatron builds it where ``post_process`` is true), so MTP layers go just before "L";
    * uneven first/last stage: the named stage gets that many layers, the remaining layers split
      evenly over the other stages; with ``vp > 1`` a stage's layers are divided evenly over its
      virtual chunks (each count must divide by vp, as Megatron checks);
    * account_for_embedding/loss: ``num_layers`` plus one per flag must divide by ``pp * vp``
      (Megatron checks per-rank divisibility by pp then by vp, which is the same condition) and
      the first (last) chunk builds one decoder layer fewer.

    Bad user input raises :class:`InputError` anchored at ``where``.
    """
    _check_positive(where, "num_layers", num_layers)
    _check_positive(where, "pipeline_model_parallel_size", pp)
    _check_positive(where, "virtual_pipeline_model_parallel_size", vp)
    if isinstance(mtp_num_layers, bool) or not isinstance(mtp_num_layers, int) or mtp_num_layers < 0:
        raise InputError(where, "mtp_num_layers", f"must be a non-negative integer, got {mtp_num_layers!r}")
    if vp > 1 and pp == 1:
        raise InputError(
            where, "virtual_pipeline_model_parallel_size", f"vp={vp} needs pipeline parallelism (pp > 1)"
        )

    uneven = decoder_first_pipeline_num_layers is not None or decoder_last_pipeline_num_layers is not None
    account = account_for_embedding_in_pipeline_split or account_for_loss_in_pipeline_split
    mechanisms = [
        name
        for name, used in (
            ("decoder_first/last_pipeline_num_layers", uneven),
            ("account_for_embedding/loss_in_pipeline_split", account),
            (LAYOUT_FIELD, layout is not None),
        )
        if used
    ]
    if len(mechanisms) > 1:
        raise InputError(
            where,
            mechanisms[-1] if layout is None else LAYOUT_FIELD,
            f"only one way to split layers over pipeline stages may be given, got {' and '.join(mechanisms)}",
        )

    if layout is not None:
        return _from_layout_string(layout, num_layers, pp, vp, mtp_num_layers, where)
    if uneven:
        counts = _uneven_counts(
            num_layers, pp, vp, decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers, where
        )
    elif account:
        counts = _accounted_counts(
            num_layers,
            pp,
            vp,
            account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split,
            where,
        )
    else:
        if num_layers % (pp * vp):
            raise InputError(
                where,
                "num_layers",
                f"{num_layers} layers do not split evenly over pp*vp={pp}*{vp}={pp * vp} model chunks; "
                f"{_SPLIT_OPTIONS}",
            )
        counts = [num_layers // (pp * vp)] * (pp * vp)
    return _assemble(pp, vp, counts, mtp_num_layers)


def _check_positive(where: str, field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(where, field, f"must be a positive integer, got {value!r}")


def _assemble(pp: int, vp: int, counts: list[int], mtp_num_layers: int) -> PipelineLayout:
    """Number decoder layers contiguously over chunks, then add E, MTP and L at the ends."""
    chunks: list[list[Item]] = []
    layer = 0
    for n in counts:
        chunks.append([("t", layer + j) for j in range(n)])
        layer += n
    chunks[0].insert(0, "E")
    chunks[-1].extend(("m", k) for k in range(mtp_num_layers))
    chunks[-1].append("L")
    return PipelineLayout(pp=pp, vp=vp, chunks=tuple(tuple(c) for c in chunks))


def _uneven_counts(
    num_layers: int, pp: int, vp: int, first: int | None, last: int | None, where: str
) -> list[int]:
    """Per-chunk decoder counts for Megatron's ``num_layers_in_first/last_pipeline_stage``."""
    if pp == 1:
        which = "first" if first is not None else "last"
        reason = "an uneven first/last stage needs pp > 1"
        raise InputError(where, f"decoder_{which}_pipeline_num_layers", reason)
    per_rank: dict[int, int] = {}
    for field, value, rank in (
        ("decoder_first_pipeline_num_layers", first, 0),
        ("decoder_last_pipeline_num_layers", last, pp - 1),
    ):
        if value is None:
            continue
        _check_positive(where, field, value)
        if value % vp:
            raise InputError(
                where, field, f"{value} layers on that stage do not divide over its vp={vp} virtual chunks"
            )
        per_rank[rank] = value
    middle_stages = pp - len(per_rank)
    remaining = num_layers - sum(per_rank.values())
    if remaining < 0:
        raise InputError(
            where,
            "num_layers",
            f"first/last stages take {sum(per_rank.values())} layers but the model has only {num_layers}",
        )
    if middle_stages == 0 and remaining:
        raise InputError(
            where,
            "num_layers",
            f"first and last stages take {num_layers - remaining} of {num_layers} layers and no middle "
            f"stage is left for the other {remaining}",
        )
    if middle_stages:
        if remaining == 0 or remaining % middle_stages:
            raise InputError(
                where,
                "num_layers",
                f"the {remaining} layers left after the first/last stage do not split evenly (and non-empty) "
                f"over the {middle_stages} middle stages",
            )
        per_middle = remaining // middle_stages
        if per_middle % vp:
            raise InputError(
                where,
                "num_layers",
                f"each middle stage gets {per_middle} layers, which do not divide over vp={vp} chunks",
            )
        for r in range(pp):
            per_rank.setdefault(r, per_middle)
    return [per_rank[i % pp] // vp for i in range(pp * vp)]


def _accounted_counts(
    num_layers: int, pp: int, vp: int, embedding: bool, loss: bool, where: str
) -> list[int]:
    """Per-chunk decoder counts when the embedding and/or loss take one layer's slot each."""
    total = num_layers + int(embedding) + int(loss)
    if total % (pp * vp):
        raise InputError(
            where,
            "num_layers",
            f"{num_layers} layers + {int(embedding) + int(loss)} (embedding/loss counted in the split) = "
            f"{total} do not split evenly over pp*vp={pp * vp} model chunks",
        )
    per_chunk = total // (pp * vp)
    counts = [per_chunk] * (pp * vp)
    if embedding:
        counts[0] -= 1
    if loss:
        counts[-1] -= 1
    if min(counts) < 0:
        raise InputError(where, "num_layers", "not enough layers for the embedding/loss chunk")
    return counts


# ---- explicit layout strings --------------------------------------------------------------------


def parse_layout_string(text: str, where: str = "pipeline") -> tuple[str, ...]:
    """Expand a Megatron layout string into one symbol string per chunk (split at ``|``).

    Grammar: what Megatron-Core's ``PipelineParallelLayerLayout.parse_str_to_list`` expands (NVIDIA/
    Megatron-LM 000c4ac pipeline_parallel_layer_layout.py lines 270-308, d98e8a6 lines 283-321): it
    unrolls each ``(...)*n`` whose body holds no parenthesis, then each ``x*n``, once, and asserts
    "Invalid layer character" on anything left, so nested groups, a group without ``*n`` and an empty
    group are refused here too: ``seq := item*``, ``item := sym ('*' n)? | '(' body ')' '*' n``,
    ``body := (sym ('*' n)?)+``, ``sym := E | L | t | m | '|'``. Commas are cosmetic (Megatron removes
    them) and whitespace is ignored (a launch line cannot carry it unquoted). Repetition counts and
    the expanded size are bounded, so a hostile string is refused with :class:`InputError` instead of
    exhausting memory; nothing is evaluated.
    """
    if not isinstance(text, str):
        raise InputError(where, LAYOUT_FIELD, f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_LAYOUT_CHARS:
        raise InputError(where, LAYOUT_FIELD, f"is {len(text)} characters long; at most {MAX_LAYOUT_CHARS}")
    src = "".join(ch for ch in text if not ch.isspace() and ch != ",")
    parser = _LayoutParser(src, where)
    symbols = parser.sequence(depth=0)
    if parser.pos != len(src):
        parser.fail("unmatched ')'")
    return tuple("".join(symbols).split("|"))


def _clip(text: str, limit: int = 80) -> str:
    """Quote a layout for a one-line error, shortened so a huge string cannot flood the terminal."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")


class _LayoutParser:
    def __init__(self, src: str, where: str) -> None:
        self.src = src
        self.pos = 0
        self.where = where

    def fail(self, reason: str) -> NoReturn:
        raise InputError(self.where, LAYOUT_FIELD, f"{reason} at position {self.pos} of {_clip(self.src)}")

    def sequence(self, depth: int) -> list[str]:
        out: list[str] = []
        while self.pos < len(self.src) and self.src[self.pos] != ")":
            atom = self.atom(depth)
            if self.pos < len(self.src) and self.src[self.pos] == "*":
                self.pos += 1
                atom = atom * self.count(len(atom))
            if len(out) + len(atom) > MAX_LAYOUT_SYMBOLS:
                self.fail(f"expands to more than {MAX_LAYOUT_SYMBOLS} symbols")
            out.extend(atom)
        return out

    def atom(self, depth: int) -> list[str]:
        ch = self.src[self.pos]
        if ch in _SYMBOLS:
            self.pos += 1
            return [ch]
        if ch == "(":
            if depth:
                self.fail("nests a '(' group inside another (Megatron-Core's parser unrolls one level of "
                          "'(...)*n' and asserts on the '(' left over)")
            self.pos += 1
            start = self.pos
            inner = self.sequence(depth + 1)
            if self.pos >= len(self.src):
                self.fail("unclosed '('")
            if self.pos == start:
                self.fail("has an empty '()' group (Megatron-Core's parser unrolls only '(...)*n' with a body)")
            self.pos += 1  # the ')'
            if self.pos >= len(self.src) or self.src[self.pos] != "*":
                self.fail("has a '(...)' group without '*n' after it (Megatron-Core's parser unrolls only "
                          "'(...)*n' and asserts on the parentheses left over)")
            return inner
        self.fail(f"unexpected character {ch!r} (known: E embedding, t decoder, m MTP, L loss, | ( ) *n)")

    def count(self, unit: int) -> int:
        start = self.pos
        while self.pos < len(self.src) and self.src[self.pos] in "0123456789":
            self.pos += 1
        digits = self.src[start : self.pos]
        if not digits:
            self.fail("'*' must be followed by a repeat count")
        if len(digits) > _MAX_REPEAT_DIGITS:
            self.fail("repeat count is too large")
        n = int(digits)
        if unit * n > MAX_LAYOUT_SYMBOLS:
            self.fail(f"expands to more than {MAX_LAYOUT_SYMBOLS} symbols")
        return n


def _from_layout_string(
    text: str, num_layers: int, pp: int, vp: int, mtp_num_layers: int, where: str
) -> PipelineLayout:
    """Validate an explicit layout like Megatron's ``PipelineParallelLayerLayout.validate_layer_layout``.

    Stricter than Megatron in one respect: the embedding must be the first item of chunk 0 and the
    loss the last item of the last chunk (Megatron only checks first/last in layer order, which
    would accept an empty chunk 0; but it builds the embedding where ``pre_process`` is true, i.e. on
    rank 0's first virtual stage, so such a layout would not train as written).
    """
    stages = parse_layout_string(text, where)

    def bad(reason: str) -> InputError:
        return InputError(where, LAYOUT_FIELD, f"{_clip(text)}: {reason}")

    if len(stages) != pp * vp:
        hint = f" (that would be vp={len(stages) // pp})" if len(stages) % pp == 0 else ""
        raise bad(f"has {len(stages)} stages separated by '|' but pp*vp={pp}*{vp}={pp * vp}{hint}")
    flat = "".join(stages)
    counts = {s: flat.count(s) for s in "ELtm"}
    if counts["E"] != 1 or not stages[0].startswith("E"):
        raise bad("needs exactly one embedding 'E', as the first item of the first stage")
    if counts["L"] != 1 or not stages[-1].endswith("L"):
        raise bad("needs exactly one loss 'L', as the last item of the last stage")
    if counts["t"] != num_layers:
        raise bad(f"has {counts['t']} decoder layers 't' but the model has num_layers={num_layers}")
    if counts["m"] != mtp_num_layers:
        raise bad(f"has {counts['m']} MTP layers 'm' but mtp_num_layers={mtp_num_layers}")
    if counts["m"]:
        if "t" in flat[flat.index("m") :]:
            raise bad("decoder layers must all come before the MTP layers")
        holders = [i for i, s in enumerate(stages) if "m" in s]
        if len(holders) != 1:
            raise bad("all MTP layers must be in one stage")
        if holders[0] // pp != vp - 1:
            raise bad("MTP layers must be in the last virtual stage of their pipeline rank")

    chunks: list[tuple[Item, ...]] = []
    next_index = {"t": 0, "m": 0}
    for stage in stages:
        items: list[Item] = []
        for sym in stage:
            if sym in next_index:
                items.append((sym, next_index[sym]))
                next_index[sym] += 1
            else:
                items.append(sym)
        chunks.append(tuple(items))
    return PipelineLayout(pp=pp, vp=vp, chunks=tuple(chunks))


def balanced_layout(num_layers: int, pp: int, vp: int, mtp_num_layers: int = 0) -> PipelineLayout:
    """The most even split Megatron would need an explicit layout for: chunk sizes differ by at most
    one, the larger chunks last (the first chunk also carries the embedding).

    Used by the memory ledger to estimate a split that Megatron's default options refuse, so that
    "this split is not allowed" and "this split does not fit" stay separate questions.
    """
    chunks = pp * vp
    base, extra = divmod(num_layers, chunks)
    counts = [base + (1 if i >= chunks - extra else 0) for i in range(chunks)]
    return _assemble(pp, vp, counts, mtp_num_layers)
