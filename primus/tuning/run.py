"""One `primus tune` run, as the CLI and the Python API start it: claim the output directory, tune
(optionally over the allowed precisions), checkpoint, and write the audited run directory.

The CLI maps its options to a `TuneSettings` and the options to record (what `--resume` reads back);
`primus.tuning` does the same from keyword arguments. Both get a `TuneAnswer`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from primus.errors import InputError, shown
from primus.job import Job, job_from_mapping
from primus.report.audit import Checkpoint, partial_dir
from primus.report.owned import claimable
from primus.tuning.agent import Tuner, TuneSettings
from primus.tuning.llm import LlmSettings
from primus.tuning.output import input_texts, write_run_dir
from primus.tuning.variants import changes_text

#: What `--resume` takes from the interrupted run's checkpoint rather than from the command line.
RESUMED_FROM_STATE = ("job_file", "stack", "rule_texts", "rule_files", "without", "exhaustive_limit", "llm_mode",
                      "llm_base_url", "llm_model", "llm_calls", "llm_timeout", "allow")
#: What tuning may change when the user allows it: a convergence setting (precision; never GBS, sequence or
#: data order) or the job's pipeline options (`pipeline:`, which layers each stage holds; numerics unchanged).
ALLOWABLE = ("precision", "pipeline")
#: The ranges the CLI options accept, and what a checkpoint's options and the API's arguments must hold:
#: --exhaustive-limit, --llm-calls and --llm-timeout (seconds); --workers' is primus.processes.WORKERS_RANGE.
EXHAUSTIVE_LIMIT_RANGE = (0, 10_000_000)
LLM_CALLS_RANGE = (0, 100)
LLM_TIMEOUT_RANGE = (0.1, 600.0)
#: The first line of `inputs/job.yaml` when `--allow pipeline` changed the job's pipeline options (`audit
#: verify` then requires `allowed_changes.pipeline`, the record of the trials, in result.json).
PIPELINE_CHANGED_NOTE = "# pipeline options changed by `primus tune --allow pipeline`\n"
#: The first line of `inputs/job.yaml` (after a `--stack` note) when `--allow precision` changed the job's
#: precision (`audit verify` then requires `allowed_changes.precision`, the record of the trials).
PRECISION_CHANGED_NOTE = "# precision changed by `primus tune --allow precision`\n"
#: The job file's precision settings: those `--allow precision` rewrites (`precision_mapping`) and records as
#: requested (`allowed_changes.precision.requested_settings`), so that `audit verify` rebuilds the requested job.
PRECISION_FIELDS = ("precision", "fp8_recipe", "fp8_param_gather")
_LISTS = ("rule_texts", "rule_files", "without", "allow")
_OPTIONAL_TEXT = ("job_file", "stack", "llm_base_url")
_NUMBERS: dict[str, tuple[tuple[float, float], bool]] = {  # option: (range, whole numbers only)
    "exhaustive_limit": (EXHAUSTIVE_LIMIT_RANGE, True), "llm_calls": (LLM_CALLS_RANGE, True),
    "llm_timeout": (LLM_TIMEOUT_RANGE, False)}


def check_state(state: dict[str, Any], where: str) -> dict[str, Any]:
    """The options an interrupted run's checkpoint state recorded (see `check_options`), after checking
    that it holds them and the sha256 of each input as `primus tune` writes them."""
    if not isinstance(state.get("options"), dict):
        raise InputError(where, "options", "missing or not a mapping; start the run afresh")
    sums = state.get("inputs_sha256")
    if not isinstance(sums, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in sums.items()):
        raise InputError(where, "inputs_sha256", "missing or not a mapping of file names to sha256; start the "
                         "run afresh")
    return check_options(state["options"], where)


def check_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """The options a run records (RESUMED_FROM_STATE), each of the type and in the range the CLI accepts;
    an InputError names the first that is not (a hand-edited checkpoint, a wrong API argument). A
    checkpoint written before `--stack` existed ran on its job file's own stack."""
    options = {"stack": None, **options}
    for key in RESUMED_FROM_STATE:
        if key not in options:
            raise InputError(where, key, "missing")
        value = options[key]
        if key in _LISTS:
            if isinstance(value, str) or not isinstance(value, list | tuple) \
                    or not all(isinstance(v, str) for v in value):
                raise InputError(where, key, f"must be a list of strings, got {shown(value)}")
        elif key in _OPTIONAL_TEXT:
            if value is not None and not isinstance(value, str):
                raise InputError(where, key, f"must be a string or null, got {shown(value)}")
        elif key in _NUMBERS:
            (low, high), whole = _NUMBERS[key]
            number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
            if number is None or (whole and not isinstance(number, int)) or not low <= number <= high:
                span = f"an integer from {low:,} to {high:,}" if whole else f"a number from {low:g} to {high:g}"
                raise InputError(where, key, f"must be {span}, got {shown(value)}")
        elif key == "llm_mode":
            if value not in ("auto", "none"):
                raise InputError(where, key, f"must be 'auto' or 'none', got {shown(value)}")
        elif not isinstance(value, str):
            raise InputError(where, key, f"must be a string, got {shown(value)}")
    unknown = [a for a in options["allow"] if a not in ALLOWABLE]
    if unknown:
        raise InputError(where, "allow", f"{', '.join(unknown)} cannot be changed by tuning (only "
                         f"{', '.join(ALLOWABLE)})")
    return {k: options[k] for k in RESUMED_FROM_STATE}


def job_text_with_stack(text: str, stack: str | None) -> str:
    """The job file as the run records it (`inputs/job.yaml`): with `--stack`, the file's `stack:`
    replaced, so that the report, `--resume` and `primus report --verify` read the stack tuning used. A
    job file that is an earlier run's `inputs/job.yaml` drops that run's notes (`tune_notes`): they say
    what that run changed, and `audit verify` would hold this run to them (a precision note without the
    record of the trials is a difference)."""
    text = "".join(text.splitlines(keepends=True)[len(tune_notes(text)):])
    if stack is None:
        return text
    data = yaml.safe_load(text)
    data["stack"] = stack
    return f"# stack set by `primus tune --stack {stack}`\n" + yaml.safe_dump(data, sort_keys=False)


@dataclass(frozen=True)
class TuneAnswer:
    """`primus tune`: the result document (best layout, proof, reference, top-k, events) and where the
    audited run directory was written."""

    result: dict[str, Any]
    out_dir: Path

    @property
    def negative(self) -> bool:
        return self.result["best"]["parallel"] is None

    @property
    def best(self) -> dict[str, Any]:
        return dict(self.result["best"])

    def to_json(self) -> dict[str, Any]:
        return self.result


def run_tune(job: Job, job_text: str, target: Path, settings: TuneSettings, *, options: dict[str, Any],
             resume_state: dict[str, Any] | None = None, say: Callable[[str], None] = lambda m: None,
             notes: Sequence[str] = ()) -> TuneAnswer:
    """Tune `job` into the run directory `target` (claimed first: new, empty, or a run directory of
    tune's own). `options` are recorded in the checkpoint for `--resume` (rules are read from them);
    `resume_state` is an interrupted run's checkpoint state to continue; `notes` are said once the
    directory is claimed (a refusal is then the only line)."""
    resuming = resume_state is not None
    if not resuming:
        claimable(partial_dir(target.resolve()), "checkpoint", "checkpoint of --out",
                  "tune keeps its checkpoint there: move it away or choose another --out")
    claimable(target.resolve(), "run", "--resume" if resuming else "--out")  # before any work
    if not resuming:
        for note in notes:
            say(note)
    rules: dict[str, Any] = {"rule_texts": list(options.get("rule_texts", [])),
                             "rule_files": list(options.get("rule_files", [])),
                             "without": list(options.get("without", []))}
    allowed_changes = None
    if "precision" in options.get("allow", []):
        chosen, allowed_changes = choose_precision(job, job_text, settings, rules, say)
        if chosen.spec.precision != job.spec.precision:
            job_text = rewritten(job_text, at_precision(job_text, chosen.spec.precision), PRECISION_CHANGED_NOTE)
            job = chosen
    if "pipeline" in options.get("allow", []):
        chosen, change = choose_pipeline(job, job_text, settings, rules, say)
        if change is not None:
            job_text = rewritten(job_text, with_pipeline(job_text, change["pipeline"]["chosen"]),
                                 PIPELINE_CHANGED_NOTE)
            job = chosen
        allowed_changes = {**(allowed_changes or {}), **(change or {})} or None
    tuner = Tuner(job, settings, progress=say, **rules)
    inputs = input_texts(job_text, tuner)
    sums = {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in sorted(inputs.items())}
    if resume_state is not None:
        before = resume_state["inputs_sha256"]
        changed = [n for n in sorted(set(sums) | set(before)) if sums.get(n) != before.get(n)]
        if changed:
            raise InputError(str(target), "--resume", f"inputs changed since the interrupted run "
                             f"({', '.join(changed)}); start afresh without --resume")
        for note in notes:  # a resumed run is claimed once its inputs are the interrupted run's
            say(note)
        checkpoint = Checkpoint.reopen(target)
        say(f"resuming from {checkpoint.root}: {checkpoint.recorded:,} candidates and "
            f"{len(checkpoint.llm_calls)} LLM call(s) on record")
    else:
        if partial_dir(target.resolve()).exists():
            say(f"discarding the checkpoint of an interrupted run in {partial_dir(target.resolve())} "
                "(continue one with --resume DIR)")
        checkpoint = Checkpoint.start(target, {"options": options, "inputs_sha256": sums})
    tuner.attach(checkpoint)
    try:
        doc = tuner.run()
    finally:
        checkpoint.close()
    doc["log"] = "audit.jsonl"  # relative to the run directory, so that a moved run stays right (review 49, L3)
    if allowed_changes is not None:
        doc["allowed_changes"] = allowed_changes
    write_run_dir(target, doc, tuner.log.entries, tuner.transcripts, inputs, tuner.log.lines)
    checkpoint.discard()
    return TuneAnswer(doc, target)


def precision_candidates(job: Job) -> list[str]:
    """The job's precision first, then the others its accelerator has a dense peak for (fp8 needs an
    fp8 peak; the fp8 recipe is the framework default for the hardware generation)."""
    peaks = job.cluster.accelerator.peak_tflops
    out: list[str] = [job.spec.precision]
    for p in ("bf16", "fp8"):
        if p not in out and (p == "bf16" or p in peaks):
            out.append(p)
    return out


def tune_notes(job_text: str) -> list[str]:
    """The notes `primus tune` wrote at the head of a job file it rewrote (`--stack`, `--allow precision`,
    `--allow pipeline`), in order: each a comment line saying what tune changed."""
    notes = []
    for line in job_text.splitlines(keepends=True):
        if not (line.startswith("# ") and " by `primus tune" in line):
            break
        notes.append(line if line.endswith("\n") else line + "\n")
    return notes


def rewritten(job_text: str, data: dict[str, Any], note: str) -> str:
    """The job file rewritten as `data` by one more change: the notes of the changes before it kept (a
    `--stack` and a precision change survive a pipeline change), then `note`."""
    return "".join(tune_notes(job_text)) + note + yaml.safe_dump(data, sort_keys=False)


def at_precision(job_text: str, precision: str) -> dict[str, Any]:
    """The job file's mapping at another precision (`precision_mapping`)."""
    return precision_mapping(dict(yaml.safe_load(job_text)), precision)


def precision_mapping(data: dict[str, Any], precision: str) -> dict[str, Any]:
    """A job mapping at another precision: its own fp8 settings dropped, so that the stack's (its fp8
    recipe, whether its FP8 recipes keep the weights only in FP8) apply as they would to a job file
    written at that precision."""
    data = dict(data)
    data.update(precision=precision)
    data.pop("fp8_recipe", None)
    data.pop("fp8_param_gather", None)
    return data


def requested_precision(data: dict[str, Any]) -> dict[str, Any]:
    """The precision settings a job mapping writes (`PRECISION_FIELDS`; those it leaves to the defaults and
    the stack absent), as `allowed_changes.precision.requested_settings`."""
    return {k: data[k] for k in PRECISION_FIELDS if k in data}


@dataclass(frozen=True)
class PrecisionTrial:
    """One precision `--allow precision` tried: its job, the best tokens/s/GPU of its search (0 when
    nothing is legal) and its number of legal layouts."""

    precision: str
    job: Job
    tokens_per_s_per_gpu: float
    legal_count: int

    def record(self) -> dict[str, Any]:
        """As `allowed_changes.precision.per_precision` lists it."""
        return {"precision": self.precision, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "legal_count": self.legal_count}


def choose_precision(job: Job, job_text: str, settings: TuneSettings, rules: dict[str, Any],
                     say: Callable[[str], None]) -> tuple[Job, dict[str, Any]]:
    """With --allow precision: tune each candidate precision (exhaustively or guided, no LLM), keep the
    fastest. Each trial is the job file rewritten at that precision with its stack applied, the same job
    the audited search then runs on. Returns the chosen job and the record of the trials."""
    def tune(trial: Job) -> dict[str, Any]:
        return Tuner(trial, replace(settings, llm=LlmSettings()), **rules).run()

    def trial_job(precision: str) -> Job:
        return job_from_mapping(at_precision(job_text, precision), job.where, job.base_dir)

    trials = precision_trials(job, trial_job, tune, say)
    winner = trials[precision_winner(trials)]
    return winner.job, {"precision": {
        "requested": job.spec.precision, "requested_settings": requested_precision(dict(yaml.safe_load(job_text))),
        "chosen": winner.precision, "exhaustive_limit": settings.exhaustive_limit,
        "per_precision": [t.record() for t in trials]}}


def precision_trials(job: Job, trial_job: Callable[[str], Job], tune: Callable[[Job], dict[str, Any]],
                     say: Callable[[str], None] = lambda m: None) -> list[PrecisionTrial]:
    """The precisions `--allow precision` tries, in order (`precision_candidates`: the job's own, then bf16
    and fp8 where the accelerator has a peak), each with its job (the job itself at its own precision,
    `trial_job(precision)` otherwise) and its search's best and legal count. `tune` runs one search (no
    LLM). `primus tune` and `primus audit verify` both call this, so the recorded list is re-checked whole."""
    trials = []
    for precision in precision_candidates(job):
        trial = job if precision == job.spec.precision else trial_job(precision)
        say(f"--allow precision: trying {precision}")
        doc = tune(trial)
        trials.append(PrecisionTrial(precision, trial, doc["best"]["tokens_per_s_per_gpu"] or 0.0,
                                     doc["legal_count"]))
    return trials


def precision_winner(trials: list[PrecisionTrial]) -> int:
    """The index of the fastest trial; on a tie the job's own precision (index 0), then the earlier one."""
    return max(range(len(trials)), key=lambda k: (trials[k].tokens_per_s_per_gpu, k == 0, -k))


def with_pipeline(job_text: str, changes: dict[str, Any]) -> dict[str, Any]:
    """The job file's mapping with pipeline option changes (`pipeline.X` -> value; None drops X)."""
    return pipeline_mapping(dict(yaml.safe_load(job_text)), changes)


def pipeline_mapping(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A job mapping with pipeline option changes (`pipeline.X` -> value; None drops X)."""
    data = dict(data)
    pipeline = dict(data.get("pipeline") or {})
    for path, value in changes.items():
        name = path.removeprefix("pipeline.")
        if value is None:
            pipeline.pop(name, None)
        else:
            pipeline[name] = value
    data["pipeline"] = pipeline
    return data


def choose_pipeline(job: Job, job_text: str, settings: TuneSettings, rules: dict[str, Any],
                    say: Callable[[str], None]) -> tuple[Job, dict[str, Any] | None]:
    """With --allow pipeline: tune the job with its own pipeline options (no LLM), then with each option set
    it names as making faster layouts legal (`faster_with_changed_options`, fastest first), and keep the
    fastest. On a tie the job's own options win, then the set that leaves the fewest pipeline options set:
    a PP 1 best is the same layout under every option set that splits one stage, and the set that unsets
    the options (none means anything on one stage) is the one to write. Returns that job and what changed
    (None if nothing did)."""
    def tune(trial: Job) -> dict[str, Any]:
        return Tuner(trial, replace(settings, llm=LlmSettings()), **rules).run()

    def trial_job(options: dict[str, Any]) -> Job:
        return job_from_mapping(with_pipeline(job_text, options), job.where, job.base_dir)

    trials = pipeline_trials(job, trial_job, tune, say)
    winner = pipeline_winner(trials)
    if winner == 0:
        return job, None
    options, chosen, _ = trials[winner]
    return chosen, {"pipeline": {"requested": requested_pipeline(job), "chosen": options,
                                 "exhaustive_limit": settings.exhaustive_limit,
                                 "per_option_set": [{"options": o, "tokens_per_s_per_gpu": t} for o, _, t in trials]}}


def pipeline_trials(job: Job, trial_job: Callable[[dict[str, Any]], Job], tune: Callable[[Job], dict[str, Any]],
                    say: Callable[[str], None] = lambda m: None) -> list[tuple[dict[str, Any], Job, float]]:
    """The option sets `--allow pipeline` tries, in order, each with its job and its best tokens/s/GPU (0 when
    nothing is legal): the job's own options (`{}`), then each distinct set its tune names in
    `faster_with_changed_options`. `tune` runs one search (no LLM); `trial_job` is the job with options set.
    `primus tune` and `primus audit verify` both call this, so the recorded list is re-checked whole."""
    say("--allow pipeline: trying the job's own pipeline options")
    doc = tune(job)
    trials: list[tuple[dict[str, Any], Job, float]] = [({}, job, doc["best"]["tokens_per_s_per_gpu"] or 0.0)]
    seen: list[dict[str, Any]] = []
    for v in doc.get("faster_with_changed_options", []):
        if v["options"] in seen:
            continue
        seen.append(v["options"])
        trial = trial_job(v["options"])
        say(f"--allow pipeline: trying {changes_text(v['options'])}")
        trials.append((v["options"], trial, tune(trial)["best"]["tokens_per_s_per_gpu"] or 0.0))
    return trials


def pipeline_winner(trials: list[tuple[dict[str, Any], Job, float]]) -> int:
    """The index of the fastest trial. On a tie the job's own options (index 0) win, then the set that leaves
    the fewest pipeline options set, then the earlier set."""
    def left_set(k: int) -> int:
        return len(trials[k][1].spec.pipeline.model_dump(exclude_defaults=True))

    return max(range(len(trials)), key=lambda k: (trials[k][2], k == 0, -left_set(k), -k))


def requested_pipeline(job: Job) -> dict[str, Any]:
    """The pipeline options the user set, by path (`pipeline.X`), as `allowed_changes.pipeline.requested`."""
    return {f"pipeline.{k}": v for k, v in job.spec.pipeline.model_dump(exclude_defaults=True).items()}
