"""NeMo-RL (GRPO, PPO, distillation): always writes
``{log_dir}/exp_NNN/train_data_step{N}.jsonl`` and ``val_data_step{N}.jsonl``.

Every value of a line is wrapped in a one-element list. A training line has the token ids
(padded to the batch's longest row, with ``input_lengths`` the real length), the loss masks
(``token_loss_mask`` on generated tokens, ``sample_loss_mask`` 0 for a filtered sample), the
reward, NeMo-RL's own advantages (one scalar broadcast over every position) and the
generation and previous log-probabilities. NeMo-RL groups rollouts by identical prompt tokens:
so does this preset, hashing the tokens before the first generated one. Its advantages are kept,
masked, as ``source_advantages`` (for ``advcli check``). A validation line has only the
messages and the reward: a group is the rows of a step with the same first user message.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from advcli.errors import DataError
from advcli.io.arrow import flat_list
from advcli.lazy_imports import np, pa, pl
from advcli.presets.base import (
    Converted,
    Preset,
    PresetOptions,
    Setting,
    group_larger_than_files,
    json_frame,
    need,
    step_of,
)

STEP = r"_step(\d+)"


def _train_field_types() -> dict[str, pl.DataType]:
    """NeMo-RL's training fields, each wrapped in a one-element list, and their types."""
    return {
        "content": pl.List(pl.List(pl.String)),
        "rewards": pl.List(pl.Float64),
        "input_lengths": pl.List(pl.Int64),
        "token_ids": pl.List(pl.List(pl.Int64)),
        "token_loss_mask": pl.List(pl.List(pl.Float64)),
        "sample_loss_mask": pl.List(pl.Float64),
        "advantages": pl.List(pl.List(pl.Float64)),
        "generation_logprobs": pl.List(pl.List(pl.Float64)),
        "prev_logprobs": pl.List(pl.List(pl.Float64)),
        "filtered_rewards": pl.List(pl.Float64),
        "idx": pl.Int64(),
    }


class NemoRl(Preset):
    name = "nemo-rl"
    framework = "NeMo-RL"
    switch = "always on (logger.log_dir)"
    writes = "LOG_DIR/exp_NNN/train_data_step{N}.jsonl (and val_data_step{N}.jsonl)"
    patterns = ("train_data_step*.jsonl", "*/train_data_step*.jsonl")
    convention = "nemo-rl"
    logged = "source_advantages"
    clips = "advantage_clip_low/high"
    marks = (
        frozenset({"token_ids", "token_loss_mask", "input_lengths", "rewards"}),
        frozenset({"content", "rewards", "idx"}),
    )

    def settings(self, names: list[str], options: PresetOptions) -> list[Setting]:
        """NeMo-RL's estimators and their switches, in combination: grpo with
        use_leave_one_out_baseline and normalize_rewards on or off (and the tied-reward std
        of NeMo-RL before its PR #4158), reinforce_plus_plus with minus_baseline on or off;
        each on the reward, and on the unfiltered rewards where dynamic sampling logged both."""
        found = []
        for reward in (None, *(["rewards"] if "filtered_rewards" in names else [])):
            for loo, normalize, tied in itertools.product((True, False), repeat=3):
                given: dict[str, Any] = {}
                notes = []
                if not loo:
                    given.update(baseline="group", scale="group")
                    notes.append("use_leave_one_out_baseline false")
                if not normalize:
                    given["scale"] = "none"
                    notes.append("normalize_rewards false")
                if not tied:
                    if not normalize:
                        continue  # the std is not read
                    notes.append(BEFORE_4158)
                found.append(Setting("grpo", tuple(given.items()), reward, "; ".join(notes),
                                     own=not notes,
                                     convention=None if tied else "nemo-rl-pre-4158"))  # fmt: skip
            found += [
                Setting("reinforce-pp-baseline", (), reward,
                        "adv_estimator reinforce_plus_plus", own=True),
                Setting("reinforce-pp", (), reward,
                        "adv_estimator reinforce_plus_plus, minus_baseline false", own=True),
            ]  # fmt: skip
        return found

    def leaves_out(self, options: PresetOptions) -> bool:
        """Whether groups are blocks of lines (rollout identity) or equal prompt tokens is not
        in the dump: the logged advantages tell, where the prompt tokens' groups miss them."""
        return options.group_size is None

    def group_sizes(self, log: Any) -> list[int]:
        """Where a prompt's rows are more than the runs of consecutive rows with one prompt
        have in common (a prompt sampled twice: two groups under rollout identity), the
        divisors of that, largest first; none where each prompt is one such block."""
        keys = log.source.columns([log.roles.column("prompt_id")]).column(0).to_numpy(False)
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        runs = np.diff(np.r_[starts, len(keys)])
        common = int(np.gcd.reduce(runs)) if len(runs) else 0
        largest = int(np.unique(keys, return_counts=True)[1].max(initial=0))
        if largest <= common:
            return []
        return [g for g in range(common, 1, -1) if common % g == 0]

    def convert(self, path: str, options: PresetOptions) -> Converted:
        df, lines = json_frame(path, train_fields)
        df = unwrap(df)
        need(path, set(df.columns), ["rewards"], self.framework)
        number = step_of(path, STEP)
        step = f"{number}:"
        idx = df["idx"] if "idx" in df.columns else pl.Series(np.arange(df.height))
        canonical: dict[str, pl.Series] = {
            "rollout_id": step + idx.cast(pl.String),
            "step": pl.Series([number] * df.height, dtype=pl.Int64),  # the file's
            "reward": df["rewards"].cast(pl.Float64),
            "batch": pl.Series([step] * df.height, dtype=pl.String),  # a step is whitened alone
        }
        warnings = []
        if "filtered_rewards" in df.columns:
            canonical["reward"] = df["filtered_rewards"].cast(pl.Float64)
            warnings.append(FILTERED_REWARDS)
        if "token_ids" in df.columns:
            need(path, set(df.columns), ["input_lengths", "token_loss_mask"], self.framework)
            refuse_odd_masks(path, df, lines)
            canonical.update(tokens(df))
            # the prompt ends at the first generated token, also in a sample NeMo-RL's overlong
            # filter dropped (sample_loss_mask 0): it stays in its prompt's baseline
            generated = canonical.pop("generated")
            prompts = prompt_hashes(canonical["input_ids"], generated)
            canonical["prompt_id"] = step + groups(path, df, prompts, lines, options.group_size)
        else:
            need(path, set(df.columns), ["content"], self.framework)
            canonical["prompt_id"] = step + pl.Series(
                [first_user_message(c) for c in df["content"].to_list()], dtype=pl.String
            )
        padded = [c for c in df.columns if c in PER_TOKEN and c != "token_ids"]
        table = df.drop([c for c in (*canonical, *padded, "token_ids") if c in df.columns])
        table = table.with_columns(**{k: v.alias(k) for k, v in canonical.items()})
        return Converted(table.to_arrow(), lines, warnings)


FILTERED_REWARDS = (
    "the reward is NeMo-RL's filtered_rewards: with dynamic sampling on, it logs there the "
    "rewards of the rows it trained on, and under rewards those of its first generation "
    "batch, dropped groups included, which are not the rows' own"
)

BEFORE_4158 = (
    "NeMo-RL before its PR #4158 divided equal rewards by the rounding noise of their float32 std"
)

PER_TOKEN = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")


def train_fields(fields: set[str]) -> dict[str, pl.DataType] | None:
    """The types of a training file's fields (read without inferring them), if these are."""
    types = _train_field_types()
    if "token_ids" not in fields or not fields <= set(types):
        return None
    return {k: v for k, v in types.items() if k in fields}


def unwrap(df: pl.DataFrame) -> pl.DataFrame:
    """Every column whose values are all one-element lists, as those elements."""
    out = {}
    for name in df.columns:
        column = df[name]
        if isinstance(column.dtype, pl.List) and (column.list.len() == 1).all():
            out[name] = column.list.first()
    return df.with_columns(**out)


def refuse_odd_masks(path: str, df: pl.DataFrame, lines: np.ndarray) -> None:
    """``token_loss_mask`` over each row's tokens and ``sample_loss_mask``: 0s and 1s. NeMo-RL
    multiplies its loss by them, so another value (0.5, 2, NaN) would weigh a token, which no
    action mask holds: refused at its line and token, as every layout's mask is."""
    from advcli.io.rollouts import Checker  # here: the log readers, which --help never needs
    from advcli.io.sources import Sources
    from advcli.io.tokens import mask_flags

    check = Checker(pa.table({}), Sources([path], [df.height], lines=[lines]))
    n = pl.col("input_lengths").cast(pl.Int64)
    heads = df.select(pl.col("token_loss_mask").list.head(n)).to_series().to_arrow()
    values, offsets = flat_list(heads)
    mask_flags(check, "token_loss_mask", values, offsets)
    if "sample_loss_mask" in df.columns:
        sample = df["sample_loss_mask"].to_arrow()
        mask_flags(check, "sample_loss_mask", sample, np.arange(len(sample) + 1))


def tokens(df: pl.DataFrame) -> dict[str, pl.Series]:
    """The per-token columns cut to each row's real length; the action mask is
    ``token_loss_mask`` × ``sample_loss_mask``; NeMo-RL's advantages masked."""
    n = pl.col("input_lengths").cast(pl.Int64)
    sample = (
        pl.col("sample_loss_mask").cast(pl.Float64) if "sample_loss_mask" in df.columns else 1.0
    )
    loss = pl.col("token_loss_mask").list.head(n).cast(pl.List(pl.Float64))
    mask = (loss * sample).list.eval(pl.element() > 0).cast(pl.List(pl.Int8))
    exprs = {
        "input_ids": pl.col("token_ids").list.head(n).cast(pl.List(pl.Int32)),
        "action_mask": mask,
        "generated": loss.list.eval(pl.element() > 0).cast(pl.List(pl.Int8)),
    }
    if "advantages" in df.columns:
        adv = pl.col("advantages").list.head(n).cast(pl.List(pl.Float64))
        exprs["source_advantages"] = (adv * mask.cast(pl.List(pl.Float64))).cast(
            pl.List(pl.Float32)
        )
    for name in ("generation_logprobs", "prev_logprobs"):
        if name in df.columns:
            exprs[name] = pl.col(name).list.head(n).cast(pl.List(pl.Float32))
    out = df.select(**exprs)
    return {name: out[name] for name in out.columns}


def groups(
    path: str, df: pl.DataFrame, prompts: pl.Series, lines: np.ndarray, size: int | None
) -> pl.Series:
    """Each row's group: NeMo-Gym's ``_ng_group_id`` (and ``_ng_group_attempt``) where the
    rows carry it; else, with ``size``, blocks of ``size`` consecutive rows (NeMo-RL's
    rollout-identity groups, PR #3882: ``num_generations_per_prompt`` rows sampled together);
    else the prompt tokens (NeMo-RL until then: equal prompts are one group)."""
    if "_ng_group_id" in df.columns:
        key = pl.lit("g") + df["_ng_group_id"].cast(pl.String)
        if "_ng_group_attempt" in df.columns:
            key = key + pl.lit(".") + df["_ng_group_attempt"].cast(pl.String)
        return df.select(key.alias("group"))["group"]
    if size is None:
        return prompts
    if size > len(prompts):
        raise group_larger_than_files(size, len(prompts), [path])
    if len(prompts) % size:
        msg = (
            f"{path}: {len(prompts)} rows are not whole groups of `group_size={size}`. Hint: "
            "give NeMo-RL's num_generations_per_prompt"
        )
        raise DataError(msg)
    block = np.arange(len(prompts)) // size
    keys = prompts.to_numpy()
    mixed = np.flatnonzero((keys[1:] != keys[:-1]) & (block[1:] == block[:-1]))
    if len(mixed):
        first = int(block[mixed[0]]) * size
        msg = (
            f"{path}: lines {lines[first]}-{lines[first + size - 1]} hold two prompts, so "
            f"blocks of `group_size={size}` lines are not NeMo-RL's groups. Hint: give "
            "num_generations_per_prompt, or leave `group_size` out to group by prompt tokens"
        )
        raise DataError(msg)
    return pl.Series([f"b{b}" for b in block.tolist()], dtype=pl.String)


def prompt_hashes(ids: pl.Series, mask: pl.Series) -> pl.Series:
    """Per row, a hash of its tokens before the first generated one (NeMo-RL's group key)."""
    import hashlib  # here: it loads OpenSSL (a few ms), and --help imports this module

    values, offsets = flat_list(ids.to_arrow())
    flat_ids = values.to_numpy(zero_copy_only=False)
    flat_mask = flat_list(mask.to_arrow())[0].to_numpy(zero_copy_only=False)
    out = []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        generated = np.flatnonzero(flat_mask[a:b])
        end = a + (int(generated[0]) if len(generated) else b - a)
        prompt = np.asarray(flat_ids[a:end], dtype=np.int32).tobytes()
        out.append(hashlib.blake2b(prompt, digest_size=8).hexdigest())
    return pl.Series(out, dtype=pl.String)


def first_user_message(content: object) -> str:
    """The first user message of a validation line's messages (or the first text)."""
    if isinstance(content, list):
        for message in content:
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content"))
        return str(content[0]) if content else ""
    return re.sub(r"\s+", " ", str(content))
