"""verl: ``trainer.rollout_data_dir`` (and ``validation_data_dir``) → ``{step}.jsonl``.

One line per rollout: ``input`` and ``output`` (decoded text), ``gts``, ``score`` (the reward),
``step``, and the reward function's extra fields. Two trainers write it:

- V1 (verl 0.9 on) adds ``uid`` = ``{prompt uuid}_{session}_{output}``: the group is the prompt
  uuid, the rollout ``{uuid}_{session}``, and the output number a segment of it (an agent loop
  that compacts its context writes several outputs, each with the final reward);
- the legacy trainer writes no uid: a group is the rows of one step with the same ``input``
  text. Two dataset rows with the same prompt text would merge (verl scored them apart, and
  ``balance_batch`` scatters their rows): a text with a multiple of the common row count is
  refused unless ``--merge-repeated-prompts`` says to merge.

The legacy writer turns some numbers into text ("0.5") and writes NaN bare: both are read.

``skip.rollout.enable=true`` → ``{dump_dir}/.../{step}/gen_batch.dp``, the generation output
with its token ids, is read by :mod:`advcli.presets.verl_proto`.
"""

from __future__ import annotations

from advcli.errors import DataError, where
from advcli.lazy_imports import np, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    frame,
    json_records,
    need,
    number,
    repeated_prompts,
    step_of,
)

UID = r"^(.+)_(\d+)_(\d+)$"
TEXT = ("input", "output", "gts", "uid", "request_id")  # fields that are text, whatever they hold


def numbers_from_text(df: pl.DataFrame) -> pl.DataFrame:
    """The legacy writer's numbers written as text (``default=str``: "0.02") as numbers: every
    text field but the prompt, response and ids whose values all read as numbers."""
    out = {}
    for name in df.columns:
        column = df[name]
        if name in TEXT or column.dtype != pl.String:
            continue
        numbers = column.str.strip_chars().cast(pl.Float64, strict=False)
        if numbers.null_count() == column.null_count() and column.null_count() < len(column):
            out[name] = numbers
    return df.with_columns(**out) if out else df


class Verl(Preset):
    name = "verl"
    framework = "verl"
    switch = "trainer.rollout_data_dir=DIR (trainer.validation_data_dir=DIR for validation)"
    writes = "DIR/{step}.jsonl"
    patterns = ("*.jsonl", "*.jsonl.gz", "*.jsonl.zst", "gen_batch.dp", "[0-9]*/gen_batch.dp")
    suffixes = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".dp")
    marks = (frozenset({"input", "output", "score", "step"}),)
    convention = "verl"

    def convert(self, path: str, options: PresetOptions) -> Converted:
        if path.lower().endswith(".dp"):
            from advcli.presets import verl_proto  # here: pickle and zipfile, for .dp files only

            return verl_proto.convert(path, options)
        records, lines = json_records(path)
        df = numbers_from_text(frame(records))
        need(path, set(df.columns), ["score"], self.framework)
        step = (
            df["step"]
            if "step" in df.columns
            else pl.Series([step_of(path, r"(\d+)\.jsonl")] * df.height)
        )
        merged: list[str] = []
        if "uid" in df.columns:
            parts = df["uid"].cast(pl.String).str.extract_groups(UID)
            bad = parts.struct.field("1").is_null().to_numpy()
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                msg = (
                    f"{where(path, int(lines[row]), 'uid', line=True)}: {df['uid'][row]!r} is "
                    "not verl V1's {prompt uuid}_{session}_{output}. Hint: check the file"
                )
                raise DataError(msg)
            prompt = parts.struct.field("1")
            ids = {
                "prompt_id": prompt,
                "rollout_id": prompt + "_" + parts.struct.field("2"),
                "segment_index": parts.struct.field("3").cast(pl.Int64),
            }
        else:
            need(path, set(df.columns), ["input"], self.framework)
            scope = step.cast(pl.String) + ":"
            prompt = scope + df["input"].cast(pl.String)
            merged = repeated_prompts(path, lines, prompt, df["input"], column="input",
                                      within=f" of step {step[0]}", apart=VERL_APART,
                                      merge=options.merge_repeated_prompts)  # fmt: skip
            ids = {"prompt_id": prompt, "rollout_id": scope + pl.Series(lines).cast(pl.String)}
        reward, warnings, doubt = trained_reward(path, df, lines)
        warnings += merged
        canonical = {**ids, "reward": reward, "step": step, "batch": step.cast(pl.String)}
        table = df.drop([c for c in canonical if c in df.columns]).with_columns(
            **{k: v.alias(k) for k, v in canonical.items()}
        )
        return Converted(table.to_arrow(), lines, warnings, reward_doubt=doubt)


VERL_APART = (
    "verl scored as separate groups and its legacy dump (no uid) cannot tell apart. Hint: "
    "pass `merge_repeated_prompts=True` to score them as one group (not verl's numbers), or dump "
    "with verl's V1 trainer, which writes the uid"
)

MATH_DAPO = {"acc", "pred"}
"""The fields beside ``score`` of the dict verl's ``math_dapo.compute_score`` returns."""

PENALISED = (
    "the reward is score + overlong_reward: verl's DAPO reward manager trained on the reward "
    "function's score plus its overlong penalty, and the dump's score is the reward function's "
    "own (its dict's score overwrites the trained one)"
)


def trained_reward(
    path: str, df: pl.DataFrame, lines: np.ndarray
) -> tuple[pl.Series, list[str], str | None]:
    """The reward verl trained on, what to say about it, and a doubt about it that only naming
    the reward column settles (None: none).

    verl's dump writer puts the trained reward in ``score`` and then every field of the reward
    function's dict over it, ``score`` included. Under the DAPO reward manager the trained
    reward is that score plus the overlong penalty: where the dump logs ``overlong_reward``
    and the function returned a dict (its ``acc`` is not the raw score that makes ``score ==
    acc + overlong_reward`` of a number result), the reward is their sum. math_dapo's dict
    (``acc`` and ``pred``) without ``overlong_reward`` may hide a penalty nowhere in the dump.
    """
    score = number(df, "score", path, lines)
    extras = set(df.columns) - {*TEXT, "score", "step", "input", "output", "gts"}
    if "overlong_reward" in df.columns:
        _refuse_misaligned(path, df, lines)
        penalty = number(df, "overlong_reward", path, lines)
        acc = df["acc"] if "acc" in df.columns else None
        if acc is not None and acc.dtype.is_float():
            gap = (score - (acc + penalty)).abs().fill_null(np.inf).to_numpy()
            if (gap <= 1e-6 * (1 + np.abs(score.to_numpy()))).all():
                return score, [], None  # a number result: score is the trained reward
        return score + penalty, [PENALISED], None
    if extras - {"overlong"} == MATH_DAPO:
        _refuse_misaligned(path, df, lines)
        doubt = (
            f"{where(path, int(lines[0]), 'score', line=True)}: the reward function returned "
            "math_dapo's dict (score, acc, pred), whose score is the dump's: verl's DAPO reward "
            "manager may have trained on it plus an overlong penalty that only "
            "overlong_buffer_cfg.log=true writes (as overlong_reward). Hint: "
            "`col=['reward=score']` reads the score as the reward knowingly"
        )
        return score, [], doubt
    return score, [], None


def _refuse_misaligned(path: str, df: pl.DataFrame, lines: np.ndarray) -> None:
    """Refuse a dump whose reward-function fields are not its rows' own: math_dapo's ``pred``
    (the answer it read in the response) found in few rows' ``output``. verl's DAPO recipe
    trainer logs those fields in the order it generated the rows and the text after
    ``balance_batch`` reordered them."""
    if "pred" not in df.columns or "output" not in df.columns:
        return
    pred, output = df["pred"].cast(pl.String).to_list(), df["output"].cast(pl.String).to_list()
    read = [i for i, p in enumerate(pred) if p and p != "[INVALID]"]
    found = [i for i in read if pred[i] in (output[i] or "")]
    if len(read) < 4 or 2 * len(found) >= len(read):
        return
    row = next(i for i in read if i not in set(found))
    msg = (
        f"{where(path, int(lines[row]), 'pred', line=True)}: the reward function's fields are "
        f"not the lines' own: its answer {pred[row]!r} is not in the line's output, and only "
        f"{len(found)} of {len(read)} lines hold theirs (verl's DAPO recipe trainer writes "
        "them, score included, in the order it generated the rows, and input and output after "
        "balance_batch reordered them). Hint: this dump cannot give verl's rewards; dump with "
        "trainer.balance_batch=False"
    )
    raise DataError(msg)
