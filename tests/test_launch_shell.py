"""Issue 18 item 2 and issue 21 item 1: Megatron-LM launch scripts written the way upstream's
`examples/` are (bash arrays, variables, defaults, arithmetic, `if` blocks, quoted multi-line strings)
are read statically, the way bash would expand them, and never run."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.errors import InputError
from primus.launch import import_launch, load_launch_job
from primus.launch.shell import read_script, statements

DATA = Path(__file__).resolve().parent / "data" / "launch" / "megatron"
ARRAYS = DATA / "llama3_8b_arrays_fp8.sh"  # the structure of Megatron-LM examples/llama (d98e8a6)
MODEL_ARGS = DATA / "llama3.1_8b_model_args.sh"  # the structure of examples/post_training/modelopt/conf


def test_array_script_reads_world_size_layout_and_vocab_from_arrays_and_variables() -> None:
    config = import_launch("megatron", ARRAYS, hardware="h100-80gb")
    job = config.job
    assert job["nodes"] == 2  # torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES
    par = job["parallel"]
    # TP_SIZE=2, PP_SIZE=$((WORLD_SIZE / 8)) with WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES)) = 16
    assert (par["tp"], par["pp"], par["dp"], par["mbs"], par["sp"]) == (2, 2, 4, 1, True)
    assert par["sharding"] == "dist_opt"  # TRAINING_ARGS+=("${DDP_ARGS[@]}")
    assert job["overlap"]["grad_reduce"] is True
    assert (job["precision"], job["seq_len"], job["global_batch_size"]) == ("fp8", 8192, 128)  # the DTYPE branch
    assert job["model"] == "llama3-8b"  # --vocab-size 128256 inside a quoted array element (the MOCK branch)


def test_array_script_reports_what_it_did_not_run() -> None:
    config = import_launch("megatron", ARRAYS, hardware="h100-80gb")
    assert any(n.startswith('line 10: $(dirname "$CHECKPOINT_PATH") is not run') for n in config.notes)
    assert any("line 78" in n and "cannot be decided" in n for n in config.notes)  # [ ! -f ... ]
    assert "launcher prefix: uv run" in config.unmodelled
    assert any(n.startswith("CUDA_DEVICE_MAX_CONNECTIONS=1: a launch requirement") for n in config.notes)
    assert "--fp8-amax-history-len 1024" in config.unmodelled
    assert "--save checkpoints/llama3_8b" in config.unmodelled  # ${1:-"checkpoints/llama3_8b"}


def test_a_file_of_model_arguments_imports_as_a_model() -> None:
    config = import_launch("megatron", MODEL_ARGS)  # no --hardware needed: it is a model, not a job
    assert config.model_only and config.job == {"model": "llama3.1-8b"}
    assert any("no launch line: the arguments of MODEL_ARGS" in n for n in config.notes)
    with pytest.raises(InputError, match="defines a model only"):
        load_launch_job("megatron", MODEL_ARGS, hardware="h100-80gb", nodes=1)


@pytest.mark.parametrize(("name", "message"), [
    ("hybrid_model_args.sh", "not supported: hybrid"),
    ("bert_arrays.sh", "not supported: BERT"),
])
def test_what_is_not_a_decoder_training_run_says_what_it_is(name: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        import_launch("megatron", DATA / name, hardware="h100-80gb", nodes=1)


def test_torchrun_nproc_per_node_without_nnodes_is_one_node(tmp_path: Path) -> None:
    # torchrun's --nnodes defaults to 1 (torch/distributed/run.py)
    text = ARRAYS.read_text().replace("    --nnodes $NUM_NODES\n", "").replace("PP_SIZE=$((WORLD_SIZE / 8))",
                                                                          "PP_SIZE=1")
    path = tmp_path / "one_node.sh"
    path.write_text(text)
    config = import_launch("megatron", path, hardware="h100-80gb")
    assert config.job["nodes"] == 1 and config.job["parallel"]["dp"] == 4
    assert any("without --nnodes: one node" in n for n in config.notes)


def test_expansion_follows_bash() -> None:
    script = read_script(
        'A=( --x 1 "--y 2" )\nA+=(--z)\nB="${A[@]}"\nN=${UNSET:-7}\nM=$(( (N + 1) * 3 / 2 ))\n'
        "C='$N literal'\nD=${N:+set}\nif [ \"$N\" -gt 5 ] && [[ -n $N ]]; then E=big; else E=small; fi\n"
        "while true; do F=never; done\ncmd ${A[@]} \"${A[@]}\" `hostname`\n", "t.sh")
    assert script.variables["A"] == ["--x", "1", "--y 2", "--z"]
    assert (script.variables["N"], script.variables["M"], script.variables["C"]) == ("7", "12", "$N literal")
    assert (script.variables["D"], script.variables["E"]) == ("set", "big")
    # a loop body is never entered: what it assigns is unknown from where it runs (bash runs `while true`)
    assert script.why_unresolved(str(script.variables["F"])) == "the while loop on line 9"
    words = script.commands[0].words
    assert words[:6] == ("cmd", "--x", "1", "--y", "2", "--z")  # unquoted: split again
    assert words[6:10] == ("--x", "1", "--y 2", "--z")  # quoted [@]: one word per element
    assert script.unresolved == ["line 10: `hostname` is not run (read, never executed)"]


def test_statements_follow_quotes_continuations_and_comments() -> None:
    text = 'X="a \\\nb"  # note\nY=(1\n# inside\n2)\nZ=3; W=4\n'
    assert statements(text, "t.sh") == [(1, 'X="a b"'), (3, "Y=(1\n\n2)"), (6, "Z=3"), (6, "W=4")]
    with pytest.raises(InputError, match="unterminated"):
        statements('X="open\n', "t.sh")


def test_mla_with_qk_layernorm_is_the_catalog_deepseek_v3(tmp_path: Path) -> None:
    # Megatron-LM's DeepSeek-R1 model definition (examples/post_training/modelopt/conf) passes --qk-layernorm:
    # with MLA it builds the q/kv latent norms DeepSeek-V3 has, so it is still deepseek-v3
    args = ("--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 "
            "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-layernorm "
            "--qk-pos-emb-head-dim 64 --v-head-dim 128 --num-experts 256 --moe-router-topk 8 "
            "--moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 --moe-layer-freq [0]*3+[1]*58 "
            "--mtp-num-layers 1 --max-position-embeddings 163840 --position-embedding-type rope "
            "--normalization RMSNorm --swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
            "--attention-dropout 0.0 --hidden-dropout 0.0 --bf16 --seq-length 4096 --micro-batch-size 1")
    path = tmp_path / "DeepSeek-V3.sh"
    path.write_text(f'TOKENIZER_MODEL="deepseek-ai/DeepSeek-V3"\nMODEL_ARGS=" {args} "\n')
    config = import_launch("megatron", path)
    assert config.job == {"model": "deepseek-v3"}
    assert any("vocabulary 129280 from the tokenizer of deepseek-ai/DeepSeek-V3" in n for n in config.notes)


def test_gpt2_bpe_tokenizer_gives_its_vocabulary(tmp_path: Path) -> None:
    # GPT-2's BPE vocabulary has 50,257 tokens; Megatron pads it (to 50,304 at 128 x TP 1)
    path = tmp_path / "gpt.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
                    "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 4 "
                    "--global-batch-size 256 --bf16 --tokenizer-type GPT2BPETokenizer\n")
    job, config = load_launch_job("megatron", path, hardware="h100-80gb")
    assert job.model.vocab_size == 50257 and job.model.padded_vocab_size(1) == 50304
    assert any("vocabulary 50257 from GPT-2's BPE vocabulary" in n for n in config.notes)


def test_a_nemotron_mini_definition_takes_its_tokenizers_vocabulary(tmp_path: Path) -> None:
    # nvidia/Nemotron-Mini-4B-Instruct config.json: vocab_size 256000, hidden 3072, FFN 9216 (squared ReLU),
    # 32 layers, 24 heads, 8 query groups, untied embeddings; Megatron-LM's modelopt definition of it gives
    # the tokenizer and --make-vocab-size-divisible-by 1, no --vocab-size
    path = tmp_path / "Nemotron-Mini-4B-Instruct.sh"
    path.write_text('TOKENIZER_MODEL=nvidia/Nemotron-Mini-4B-Instruct\nMODEL_ARGS=" --num-layers 32 --hidden-size 3072 '
                    "--ffn-hidden-size 9216 --num-attention-heads 24 --group-query-attention --num-query-groups 8 "
                    "--squared-relu --normalization LayerNorm --untie-embeddings-and-output-weights "
                    "--disable-bias-linear --seq-length 4096 --max-position-embeddings 4096 "
                    '--tokenizer-type HuggingFaceTokenizer --make-vocab-size-divisible-by 1 "\n')
    config = import_launch("megatron", path)
    assert any("vocabulary 256000 from the tokenizer of nvidia/Nemotron-Mini-4B-Instruct" in n for n in config.notes)


def test_an_inference_script_is_not_a_training_run(tmp_path: Path) -> None:
    path = tmp_path / "serve.sh"
    path.write_text("torchrun --nproc-per-node 8 tools/run_text_generation_server.py --num-layers 24 "
                    "--hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 --bf16\n")
    with pytest.raises(InputError, match="not supported: inference"):
        import_launch("megatron", path, hardware="h100-80gb")


def test_a_here_document_is_data_not_statements() -> None:
    text = "cat > cfg.txt <<'EOF'\nit's \"unbalanced\n  --num-layers 99\nEOF\nA=1\n"
    assert statements(text, "t.sh") == [(1, "cat > cfg.txt <<'EOF'"), (5, "A=1")]


def test_a_sourced_file_is_read_in_place_relative_to_the_script() -> None:
    # `. \`pwd\`/CONFIG.sh` (sc21's form): CONFIG.sh's NNODES and MODEL_ARGS are read as if written there
    config = import_launch("megatron", DATA / "sourced" / "run_sourced.sh", hardware="h100-80gb")
    assert config.job["nodes"] == 2 and config.job["model"] == "llama3-8b"
    assert any("CONFIG.sh sourced" in n for n in config.notes)
    # a path only a run knows is said, never guessed
    assert any('source "$SANDBOX_SETUP/env.sh" is not read' in n for n in config.notes)


SUBSTITUTED = """#!/bin/bash
GPUS_PER_NODE=8
NUM_NODES=4
TP=$(echo 4)
ARGS=(
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32
  --group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm
  --disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights
  --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 128 --bf16
  --tensor-model-parallel-size $TP --pipeline-model-parallel-size 2
)
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py ${ARGS[@]}
"""


@pytest.mark.parametrize(("assignment", "shown"), [("TP=$(echo 4)", "$(echo 4)"), ("TP=`echo 4`", "`echo 4`")])
def test_a_value_from_a_command_substitution_is_unresolved_with_its_line(
        run_cli, tmp_path: Path, assignment: str, shown: str) -> None:  # type: ignore[no-untyped-def]
    # issue 21: read, never run; the substitution is one word, never split into `$(echo` and `4)`
    path = tmp_path / "t1.sh"
    path.write_text(SUBSTITUTED.replace("TP=$(echo 4)", assignment))
    code, out, err = run_cli("import", "--from", "megatron", str(path), "--hardware", "h100-80gb")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"t1.sh: line 4: --tensor-model-parallel-size: its value comes from {shown}, which primus reads " \
           "but never runs" in err


def test_a_substitution_in_an_option_primus_does_not_read_is_listed_as_written(tmp_path: Path) -> None:
    path = tmp_path / "t2.sh"
    path.write_text(SUBSTITUTED.replace("TP=$(echo 4)", 'TP=4\nSAVE="$(dirname /a/b c)"')
                    .replace("--bf16\n", '--bf16 --save "$SAVE"\n'))
    config = import_launch("megatron", path, hardware="h100-80gb")
    assert config.job["parallel"]["tp"] == 4
    assert "--save $(dirname /a/b c)" in config.unmodelled  # as the file spells it, one value
    assert any(n.startswith("line 5: $(dirname /a/b c) is not run") for n in config.notes)


SLURM_LAUNCH = """#!/bin/bash
NNODES={nnodes}
torchrun --nproc_per_node 8 --nnodes $NNODES pretrain_gpt.py --num-layers 32 --hidden-size 4096 \\
  --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 \\
  --global-batch-size 128 --tensor-model-parallel-size 2 --bf16 --vocab-size 32000
"""


@pytest.mark.parametrize("nnodes", ["$(scontrol show hostnames | wc -l)", "$SLURM_NNODES"])
def test_a_node_count_the_file_leaves_to_its_environment_is_not_one_node(tmp_path: Path, nnodes: str) -> None:
    # a Slurm launch: the node count comes from a command the file never runs, or from the job's environment;
    # it is neither torchrun's default of one node nor a malformed count
    path = tmp_path / "launch.sh"
    path.write_text(SLURM_LAUNCH.format(nnodes=nnodes))
    with pytest.raises(InputError, match="does not give the world size; give --nodes or --gpus"):
        import_launch("megatron", path, hardware="h100-80gb")
    job, _ = load_launch_job("megatron", path, hardware="h100-80gb", nodes=2)
    assert job.num_gpus == 16 and job.spec.parallel.dp == 8


def test_each_substitution_of_a_continued_command_is_reported_on_its_own_line(tmp_path: Path) -> None:
    # a `\`-continued launch line: the substitutions on its third physical line are reported there
    path = tmp_path / "launch.sh"
    path.write_text("#!/bin/bash\n"
                    "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 32 --hidden-size 4096 \\\n"
                    "  --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 \\\n"
                    "  --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000 --save $(dirname $0)/ck\n")
    config = import_launch("megatron", path, hardware="h100-80gb")
    assert any(n.startswith("line 4: $(dirname $0) is not run") for n in config.notes), config.notes


@pytest.mark.parametrize("doubling", ['A="$A$A"', 'A+=( "${A[@]}" )', 'B="$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A"'],
                         ids=["string", "array", "one-line"])
def test_a_script_whose_variables_blow_up_is_refused_in_one_line(doubling: str) -> None:
    # a 1 KB script that doubles a variable per line would reach gigabytes (bash would too, then run out of
    # memory); a launch script's variables hold a few kilobytes, so past 1,000,000 characters it is bad input
    head = "A=(x)" if "[@]" in doubling else "A=x"
    grow = ['A="$A$A"'] * 19 if doubling.startswith("B=") else [doubling] * 40  # 2**19 < 1,000,000
    text = "\n".join([head, *grow, *([doubling] if doubling.startswith("B=") else []), "torchrun x.py"])
    with pytest.raises(InputError) as err:
        read_script(text, "blowup.sh")
    assert err.value.line().startswith("blowup.sh: line ") and "characters" in err.value.line()


@pytest.mark.parametrize(("text", "why"), [
    # review of the import path, item 4: bash runs TP 8 and TP 4; the import used to read TP 2, exit 0
    ("TP=2\nrun() { TP=8; }\nrun\ncmd --tp $TP\n", "the function run (line 2, called on line 3)"),
    ("TP=2\nfor x in 4; do TP=$x; done\ncmd --tp $TP\n", "the for loop on line 2"),
    ('TP=2\ncase "$MODEL" in\n  big) TP=8;;\nesac\ncmd --tp $TP\n', "the case block on line 2"),
    ("TP=2\nwhile true; do\n  read TP\ndone\ncmd --tp $TP\n", "the while loop on line 2"),
    # a second review: a function called through another, a one-line case, `let` in a loop
    ("TP=2\ninner() { TP=8; }\nouter() { inner; }\nouter\ncmd --tp $TP\n",
     "the function outer (line 3, called on line 4)"),
    ("TP=1\ncase x in x) TP=8;; esac\ncmd --tp $TP\n", "the case block on line 2"),
    ("TP=1\nfor i in 1 2 3; do let TP*=2; done\ncmd --tp $TP\n", "the for loop on line 2"),
])
def test_a_variable_a_block_sets_where_it_runs_is_unknown(text: str, why: str) -> None:
    script = read_script(text, "t.sh")
    assert script.why_unresolved(script.commands[-1].words[-1]) == why


@pytest.mark.parametrize("text", [
    "TP=2\nusage() { TP=8; }\ncmd --tp $TP\n",  # a function never called
    "TP=2\nwhile [[ $# -gt 0 ]]; do\n  case $1 in --tp) TP=$2;; esac\n  shift\ndone\ncmd --tp $TP\n",  # no arguments
    "TP=2\nfor x in; do TP=$x; done\ncmd --tp $TP\n",  # an empty list
    "TP=2\nrun() { local TP=8; }\nrun\ncmd --tp $TP\n",  # local to the function
    "for x in 4; do TP=$x; done\nTP=2\ncmd --tp $TP\n",  # set again after the loop
    'TP=2\nfor a in "$@"; do\n  TP=8\ndone\ncmd --tp $TP\n',  # no positional parameters: "$@" is empty
    "TP=2\nfor a in $*; do TP=8; done\ncmd --tp $TP\n",
    # `esac` after `;;` on a line of its own commands closes the block (it swallowed the launch line)
    "TP=2\nwhile [[ $# -gt 0 ]]; do\n  case $1 in --tp) TP=$2; shift 2 ;; *) shift ;; esac\ndone\ncmd --tp $TP\n",
])

def test_a_block_that_does_not_run_or_touch_it_leaves_a_variable_known(text: str) -> None:
    script = read_script(text, "t.sh")
    assert script.commands[-1].words[-1] == "2"


def test_a_test_that_reads_a_variable_a_block_may_set_is_refused() -> None:
    # a second review: `if [ "$FP8" -eq 1 ]` on a variable a case block sets was decided on a placeholder
    text = 'FP8=0\ncase "$MODEL" in\n  big) FP8=1 ;;\nesac\nif [ "$FP8" -eq 1 ]; then\n  P=fp8\nfi\ncmd $P\n'
    with pytest.raises(InputError) as err:
        read_script(text, "t.sh")
    assert err.value.reason == ('the test `[ "$FP8" -eq 1 ]` reads $FP8, which the case block on line 2 may set and '
                                "primus reads but never runs, so which branch runs is unknown; set it outside the "
                                "block, with a literal value")
