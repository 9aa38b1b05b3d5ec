"""Specification of primus.schedule.layout: which layers each (pipeline stage, virtual chunk) holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from primus.errors import InputError
from primus.schedule.layout import (
    MAX_LAYOUT_CHARS,
    PipelineLayout,
    build_layout,
    parse_layout_string,
)

# ---- helpers -------------------------------------------------------------------------------------


def decoder_counts(layout: PipelineLayout) -> list[int]:
    return [len(layout.decoder_layers(i)) for i in range(layout.num_chunks)]


def all_decoders_in_chunk_order(layout: PipelineLayout) -> list[int]:
    return [layer for i in range(layout.num_chunks) for layer in layout.decoder_layers(i)]


# ---- even split ------------------------------------------------------------------------------------


def test_even_split_gives_every_chunk_the_same_number_of_layers() -> None:
    layout = build_layout(32, 4, 2)
    assert decoder_counts(layout) == [4] * 8


def test_layers_are_contiguous_in_model_chunk_order() -> None:
    layout = build_layout(32, 4, 2)
    assert all_decoders_in_chunk_order(layout) == list(range(32))
    assert layout.decoder_layers(5) == (20, 21, 22, 23)


def test_chunk_i_lives_on_rank_i_mod_pp_as_virtual_stage_i_div_pp() -> None:
    layout = build_layout(32, 4, 2)
    assert layout.stage_chunks(1) == (1, 5)
    assert (layout.chunk_rank(5), layout.chunk_virtual_stage(5)) == (1, 1)


def test_rank_holds_the_layers_of_all_its_virtual_chunks() -> None:
    layout = build_layout(32, 4, 2)
    assert layout.num_decoder_layers_on(1) == 8
    assert layout.decoder_layers(1) + layout.decoder_layers(5) == (4, 5, 6, 7, 20, 21, 22, 23)


def test_embedding_is_first_in_chunk_0_and_loss_last_in_the_last_chunk() -> None:
    layout = build_layout(32, 4, 2)
    assert layout.chunks[0][0] == "E"
    assert layout.chunks[-1][-1] == "L"
    assert [layout.has_embedding(r) for r in range(4)] == [True, False, False, False]
    assert [layout.has_loss(r) for r in range(4)] == [False, False, False, True]


def test_mtp_layers_sit_just_before_the_loss_on_the_last_stage() -> None:
    layout = build_layout(8, 2, 1, mtp_num_layers=2)
    assert layout.chunks[-1][-3:] == (("m", 0), ("m", 1), "L")
    assert layout.mtp_layers_on(1) == (0, 1)
    assert layout.mtp_layers_on(0) == ()


def test_single_stage_holds_everything() -> None:
    layout = build_layout(4, 1, 1, mtp_num_layers=1)
    assert layout.chunks == (("E", ("t", 0), ("t", 1), ("t", 2), ("t", 3), ("m", 0), "L"),)


def test_uneven_even_split_is_refused_and_suggests_the_alternatives() -> None:
    with pytest.raises(InputError) as err:
        build_layout(126, 8, 8)
    assert err.value.field == "num_layers"
    assert "account_for_embedding_in_pipeline_split" in err.value.reason
    assert "pipeline_model_parallel_layout" in err.value.reason
    assert "decoder_first_pipeline_num_layers" in err.value.reason


def test_errors_are_anchored_at_the_callers_where() -> None:
    with pytest.raises(InputError) as err:
        build_layout(7, 2, 1, where="layouts.yaml: llama")
    assert err.value.where == "layouts.yaml: llama"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_layers": 0, "pp": 1, "vp": 1}, "num_layers"),
        ({"num_layers": 4, "pp": 0, "vp": 1}, "pipeline_model_parallel_size"),
        ({"num_layers": 4, "pp": 2, "vp": -1}, "virtual_pipeline_model_parallel_size"),
        ({"num_layers": 4, "pp": True, "vp": 1}, "pipeline_model_parallel_size"),
        ({"num_layers": 4, "pp": 1, "vp": 2}, "virtual_pipeline_model_parallel_size"),
        ({"num_layers": 4, "pp": 1, "vp": 1, "mtp_num_layers": -1}, "mtp_num_layers"),
    ],
)
def test_non_positive_or_inconsistent_sizes_are_input_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        build_layout(**kwargs)
    assert err.value.field == field


def test_only_one_split_mechanism_may_be_given() -> None:
    with pytest.raises(InputError, match="only one way"):
        build_layout(
            8, 2, 1, decoder_first_pipeline_num_layers=2, account_for_embedding_in_pipeline_split=True
        )
    with pytest.raises(InputError, match="only one way"):
        build_layout(8, 2, 1, account_for_loss_in_pipeline_split=True, layout="Etttt|ttttL")


# ---- account_for_embedding / loss ------------------------------------------------------------------


def test_llama31_405b_pp8_vp8_counts_embedding_and_loss_as_layers() -> None:
    # 126 decoder layers + embedding + loss = 128 slots = 64 chunks × 2 (Megatron-Bridge recipe).
    layout = build_layout(
        126, 8, 8, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
    )
    assert layout.chunks[0] == ("E", ("t", 0))
    assert layout.chunks[1] == (("t", 1), ("t", 2))
    assert layout.chunks[63] == (("t", 125), "L")
    assert decoder_counts(layout) == [1] + [2] * 62 + [1]
    assert [layout.num_decoder_layers_on(r) for r in range(8)] == [15] + [16] * 6 + [15]


def test_qwen3_235b_pp8_vp4_splits_with_embedding_and_loss_accounted() -> None:
    # 94 + 2 = 96 = 32 chunks × 3.
    layout = build_layout(
        94, 8, 4, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
    )
    assert decoder_counts(layout) == [2] + [3] * 30 + [2]
    assert all_decoders_in_chunk_order(layout) == list(range(94))


def test_accounting_only_the_embedding_takes_a_slot_from_chunk_0_only() -> None:
    layout = build_layout(15, 2, 2, account_for_embedding_in_pipeline_split=True)
    assert decoder_counts(layout) == [3, 4, 4, 4]


def test_accounted_total_must_divide_over_all_chunks() -> None:
    with pytest.raises(InputError, match="127"):
        build_layout(126, 8, 8, account_for_embedding_in_pipeline_split=True)


# ---- uneven first / last stage ---------------------------------------------------------------------


def test_qwen3_235b_pp8_uneven_first_and_last_stage() -> None:
    layout = build_layout(94, 8, 1, decoder_first_pipeline_num_layers=10, decoder_last_pipeline_num_layers=12)
    assert [layout.num_decoder_layers_on(r) for r in range(8)] == [10] + [12] * 7
    assert all_decoders_in_chunk_order(layout) == list(range(94))


def test_qwen3_235b_pp8_vp4_cannot_use_an_uneven_split() -> None:
    # 94 ≡ 2 (mod 4): no first/last stage sizes divisible by vp=4 leave a middle divisible by 4.
    with pytest.raises(InputError):
        build_layout(94, 8, 4, decoder_first_pipeline_num_layers=12, decoder_last_pipeline_num_layers=10)


def test_uneven_split_with_vp_follows_megatron_layer_offsets() -> None:
    # Megatron: offset(rank 0, vp 1) = 1 * (first/vp + middle/vp) = 8.
    layout = build_layout(16, 2, 2, decoder_first_pipeline_num_layers=4)
    assert decoder_counts(layout) == [2, 6, 2, 6]
    assert layout.decoder_layers(2) == (8, 9)


def test_only_the_last_stage_may_be_uneven() -> None:
    layout = build_layout(20, 4, 1, decoder_last_pipeline_num_layers=2)
    assert decoder_counts(layout) == [6, 6, 6, 2]


def test_uneven_stage_layers_must_divide_over_its_virtual_chunks() -> None:
    with pytest.raises(InputError) as err:
        build_layout(16, 2, 2, decoder_first_pipeline_num_layers=3)
    assert err.value.field == "decoder_first_pipeline_num_layers"


def test_uneven_middle_layers_must_split_evenly() -> None:
    with pytest.raises(InputError, match="middle"):
        build_layout(20, 4, 1, decoder_first_pipeline_num_layers=3)


def test_uneven_split_needs_a_layer_for_every_middle_stage() -> None:
    with pytest.raises(InputError):
        build_layout(8, 4, 1, decoder_first_pipeline_num_layers=4, decoder_last_pipeline_num_layers=4)


def test_first_and_last_stage_must_take_all_layers_when_there_is_no_middle() -> None:
    with pytest.raises(InputError, match="no middle"):
        build_layout(10, 2, 1, decoder_first_pipeline_num_layers=4, decoder_last_pipeline_num_layers=4)


def test_uneven_split_needs_pipeline_parallelism() -> None:
    with pytest.raises(InputError, match="pp > 1"):
        build_layout(8, 1, 1, decoder_last_pipeline_num_layers=8)


def test_uneven_stage_size_must_be_positive() -> None:
    with pytest.raises(InputError):
        build_layout(8, 2, 1, decoder_first_pipeline_num_layers=0)


# ---- explicit layout strings ------------------------------------------------------------------------


def test_deepseek_v3_pp16_vp2_layout_with_standalone_mtp() -> None:
    layout = build_layout(61, 16, 2, mtp_num_layers=1, layout="Et*3|(tt|)*29m|L")
    assert layout.chunks[0] == ("E", ("t", 0), ("t", 1), ("t", 2))
    assert layout.chunks[29] == (("t", 59), ("t", 60))
    assert layout.chunks[30] == (("m", 0),)
    assert layout.chunks[31] == ("L",)
    assert layout.mtp_layers_on(14) == (0,)
    assert layout.has_loss(15)
    assert layout.num_decoder_layers_on(0) == 3 + 2
    assert all_decoders_in_chunk_order(layout) == list(range(61))


def test_commas_and_whitespace_are_cosmetic() -> None:
    plain = build_layout(61, 16, 2, mtp_num_layers=1, layout="Et*3|(tt|)*29m|L")
    megatron_style = build_layout(61, 16, 2, mtp_num_layers=1, layout=" Et*3 | (tt|)*29 , m | L ")
    assert plain == megatron_style


def test_layout_without_repetition() -> None:
    layout = build_layout(14, 4, 1, layout="Ettt|tttt|tttt|tttL")
    assert decoder_counts(layout) == [3, 4, 4, 3]


def test_a_group_expands_with_its_repeated_symbols() -> None:
    # Megatron-Core parse_str_to_list (NVIDIA/Megatron-LM 000c4ac pipeline_parallel_layer_layout.py
    # lines 277-288) unrolls '(...)*n' first, then 'x*n' inside the copies
    assert parse_layout_string("E(t*2|)*2tL") == ("Ett", "tt", "tL")


@pytest.mark.parametrize("text", ["E((t)*2|)*2tL", "Et|(tt)|L", "Et|()*3tL"])
def test_groups_megatron_leaves_unexpanded_are_refused(text: str) -> None:
    # Megatron-Core's one-level regex r'\(([^)]+)\)\*(\d+)' (000c4ac pipeline_parallel_layer_layout.py
    # line 284) leaves a nested, count-less or empty group's parentheses, then asserts "Invalid layer
    # character" (line 302)
    with pytest.raises(InputError, match="group"):
        parse_layout_string(text)


def test_repetition_applies_to_the_previous_symbol_only() -> None:
    assert parse_layout_string("Et*3|tL") == ("Ettt", "tL")


def test_layout_string_round_trips() -> None:
    layout = build_layout(
        126, 8, 8, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True
    )
    again = build_layout(126, 8, 8, layout=layout.layout_string())
    assert again == layout


def test_layout_may_contain_empty_middle_stages() -> None:
    layout = build_layout(4, 4, 1, layout="Ett||tt|L")
    assert decoder_counts(layout) == [2, 0, 2, 0]
    assert layout.chunks[1] == ()


@pytest.mark.parametrize(
    ("text", "num_layers", "mtp", "pp", "vp", "needle"),
    [
        ("Ett|ttL", 4, 0, 4, 1, "2 stages"),
        ("Ett|tt|tt|ttL", 8, 0, 2, 1, "vp=2"),
        ("tEt|ttL", 4, 0, 2, 1, "embedding"),
        ("Ett|ttLL", 4, 0, 2, 1, "loss"),
        ("Ett|tLt", 4, 0, 2, 1, "loss"),
        ("Ett|tL", 4, 0, 2, 1, "3 decoder"),
        ("Ett|ttL", 4, 1, 2, 1, "MTP"),
        ("Etm|ttL", 3, 1, 2, 1, "before the MTP"),
        ("Ett|ttm||L", 4, 1, 2, 2, "last virtual stage"),
        ("Ett|tt|m|mL", 4, 2, 2, 2, "one stage"),
    ],
)
def test_inconsistent_layouts_are_refused(
    text: str, num_layers: int, mtp: int, pp: int, vp: int, needle: str
) -> None:
    with pytest.raises(InputError, match=needle) as err:
        build_layout(num_layers, pp, vp, mtp_num_layers=mtp, layout=text)
    assert err.value.field == "pipeline_model_parallel_layout"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("Etx|L", "unexpected character 'x'"),
        ("E(tt|L", "unclosed"),
        ("Ett)|L", "unmatched"),
        ("Et*|L", "repeat count"),
        ("*3", "unexpected character"),
        ("Et*9999999999|L", "too large"),
        ("E(t*1000)*1000|L", "more than 100000"),
        ("E" + "(" * 40 + "t" + ")" * 40 + "|L", "inside another"),
    ],
)
def test_malformed_layout_strings_are_input_errors(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        parse_layout_string(text)


def test_overlong_layout_strings_are_refused_before_parsing() -> None:
    with pytest.raises(InputError, match="characters long"):
        parse_layout_string("t" * (MAX_LAYOUT_CHARS + 1))


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=4, max_size=4).filter(any))
def test_any_valid_chunk_assignment_survives_string_round_trip(counts: list[int]) -> None:
    stages = ["t" * n for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] += "L"
    layout = build_layout(sum(counts), 2, 2, layout="|".join(stages))
    assert decoder_counts(layout) == counts
    assert all_decoders_in_chunk_order(layout) == list(range(sum(counts)))
    assert build_layout(sum(counts), 2, 2, layout=layout.layout_string()) == layout
