"""Write a real verl 0.9.1 rollout dump with the token ids verl generated, its tokenizer, and
verl's `skip.rollout` dump (`gen_batch.dp`) of the same batches, as a test fixture.

Same machinery, versions and venv as tools/dumps/verl.py (read its docstring first); this script
imports that file's helpers (by path, as a module of its own name) and adds the `tokens` case.

Run (from the repository root, with the framework venv, never as part of CI):

    /tmp/fw/verl/bin/python tools/dumps/verl_tokens.py OUTDIR [--fixtures DIR]

What lands in `tests/fixtures/real/verl/tokens/` (each file small):
- `rollout/{step}.jsonl`: the legacy trainer's rollout dump, written by verl's own
  `RayPPOTrainer._log_rollout_data` -> `_dump_generations` -> `_write_generations` (`input`
  and `output` decoded with skip_special_tokens, so the chat template's `<|im_start|>` /
  `<|im_end|>` and the generated end-of-turn `<|im_end|>` are gone; `gts`, `score`, `step`,
  `acc`). verl 0.9.1 writes no `response_length` there: it is in `generated_ids.json`;
- `tokenizer/`: the tokenizer folder the run used, exactly as `save_pretrained` wrote it
  (`tokenizer.json`, `tokenizer_config.json`, `chat_template.jinja`);
- `generated_ids.json`: `{"rollout/<step>.jsonl": [{"uid", "prompt_ids", "response_ids",
  "response_length"}, ...]}`, one entry per dumped line in file order, taken from the
  `DataProto` the dump was written from: the prompt unpadded by its attention mask, the
  response unpadded (its `<|im_end|>` kept where the engine generated one; rows cut at
  rollout.response_length=10 have none), `response_length` the response's tokens;
- `skip/tokens_advcli_fixtures/GBS4_N4_in40_out10/{step}/gen_batch.dp` and `meta.json`: written by
  verl's own `RolloutSkip.prepare_data` (`DataProto.save_to_disk`, a plain pickle whose batch is a
  nested `torch.save` archive of a consolidated TensorDict), which
  `SkipManager.annotate(role="rollout")` calls on the output of
  `AgentLoopManager.generate_sequences` when `skip.rollout.enable=true`; its rows are in
  generation order (each prompt's n rollouts one after another, before `_balance_batch` reorders
  the batch the JSONL is written from), and it holds the rewards as `rm_scores` (the reward at the
  response's last token) with the reward loop's `acc` in its non-tensor batch;
- `truth.json`: verl's uid, score and GRPO advantage (`compute_advantage`, as in verl.py) per
  JSONL line, with verl's per-token advantages over the response of `reinforce_plus_plus` and
  `opo` (`compute_advantage` on the same batch, gamma 1), and the settings and versions.

The skip dump's folders are verl's own: `{dump_dir}/{experiment}_{project}/GBS{bs}_N{n}_in{prompt}_
out{response}/{step}/` (the group size, rollout.n, is in the folder's name and nowhere in the
file: the generation output holds no uid).

Two runs write the same files but for the two `gen_batch.dp`: their `meta_info` holds the agent
loop's wall-clock timings, and torch.save a random `serialization_id`; every tensor and
non-tensor value is the same.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# tools/dumps holds a file called verl.py: never let it shadow the real `verl` package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402

SEED = 5678
N = 4
PROMPTS_PER_STEP = 4
STEPS = 2
CASES = {
    # case: (agent loop, rollout.response_length: the longer scripted responses are cut)
    "tokens": ("single_turn_agent", 10),
    "tokens_multiturn": ("observation_agent", 24),
}
OBSERVATION = "is it the answer ?"
"""What the observation turn of `ObservationAgentLoop` says (words of the tokenizer's)."""


def define_observation_loop():
    """A two-turn agent loop (ours; verl's ToolAgentLoop needs a tool parser the word-level
    tokenizer cannot spell), built with verl's own Continuous Token methods as ToolAgentLoop
    uses them: the model answers, a user turn (the observation) is appended with
    `ct_merge_context_msg` (response_mask 0), and the model answers again
    (`ct_merge_assistant_token`, mask 1)."""
    from uuid import uuid4

    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopOutput,
        _agent_loop_registry,
    )

    class ObservationAgentLoop(AgentLoopBase):
        async def run(self, sampling_params, **kwargs):
            messages = list(kwargs["raw_prompt"])
            runtime = await self.ct_build_initial_tokens(messages)
            prompt_ids = list(runtime)
            mask, logprobs = [], []
            for turn in range(2):
                out = await self.server_manager.generate(
                    request_id=uuid4().hex, prompt_ids=runtime, sampling_params=sampling_params
                )
                merged, mask, logprobs = await self.ct_merge_assistant_token(
                    runtime, out.token_ids, mask, logprobs, assistant_logprobs=out.log_probs
                )
                runtime = merged.token_ids
                if turn == 0:
                    text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                    updated = messages + [
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": OBSERVATION},
                    ]
                    merged, mask, logprobs = await self.ct_merge_context_msg(
                        messages + [{"role": "assistant", "content": text}], updated, runtime,
                        mask, logprobs,
                    )  # fmt: skip
                    runtime, messages = merged.token_ids, updated
            response = runtime[len(prompt_ids) :][: self.rollout_config.response_length]
            return AgentLoopOutput(
                prompt_ids=prompt_ids,
                response_ids=response,
                response_mask=mask[: len(response)],
                response_logprobs=logprobs[: len(response)],
                num_turns=4,
                metrics={},
                extra_fields={"turn_scores": [], "tool_rewards": []},
            )

    ObservationAgentLoop.__module__ = __name__
    ObservationAgentLoop.__qualname__ = "ObservationAgentLoop"
    globals()["ObservationAgentLoop"] = ObservationAgentLoop
    _agent_loop_registry["observation_agent"] = {"_target_": f"{__name__}.ObservationAgentLoop"}


def load_helpers():
    """tools/dumps/verl.py, imported by path under another module name (it is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "advcli_verl_dump_helpers", os.path.join(_HERE, "verl.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def unpadded(batch, i, prompt_length):
    """Row ``i``'s prompt and response ids without padding (by the attention mask)."""
    real = batch.batch["attention_mask"][i].bool()
    prompt = batch.batch["prompts"][i][real[:prompt_length]].tolist()
    response = batch.batch["responses"][i][real[prompt_length:]].tolist()
    return prompt, response


TOKEN_ESTIMATORS = ("reinforce_plus_plus", "opo")
"""verl's estimators that read the tokens: their per-token advantages go into truth.json."""


def token_advantages(batch, cfg, estimator):
    """verl's own `compute_advantage` with `estimator`, on a copy of the batch: each row's
    advantages over its response tokens (without the padding)."""
    import copy

    from verl.trainer.ppo.ray_trainer import compute_advantage

    done = compute_advantage(
        copy.deepcopy(batch),
        adv_estimator=estimator,
        gamma=cfg.algorithm.gamma,
        lam=cfg.algorithm.lam,
        num_repeat=cfg.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=True,
        config=cfg.algorithm,
    )
    real = batch.batch["attention_mask"][:, -batch.batch["responses"].shape[1] :].bool()
    return [a[r].tolist() for a, r in zip(done.batch["advantages"], real, strict=True)]


def run_tokens_case(H, case, work, seed):
    from omegaconf import open_dict
    from verl.utils.skip.skip_manager import SkipManager

    agent_loop, response_length = CASES[case]
    loop, cfg, tokenizer, llm = H.setup(case, work, seed, n=N, train_bs=PROMPTS_PER_STEP,
                                        response_length=response_length,
                                        agent_loop=agent_loop)  # fmt: skip
    llm.log_probs = True  # a scripted log-prob per token: the agent loop's rollout_log_probs
    skip_dir = os.path.join(work, "skip")
    with open_dict(cfg):
        cfg.skip.rollout.enable = True
        cfg.skip.rollout.dump_dir = skip_dir
        cfg.skip.rollout.steps = list(range(1, STEPS + 1))
    SkipManager.init(cfg)  # as RayPPOTrainer.fit does
    reward_handles, workers = H.build_workers(cfg, llm)
    mgr = H.make_rollout_manager(cfg, llm, reward_handles, workers)
    dl = H.make_dataloader(cfg, H.make_rows(H.QUESTIONS, "train"), tokenizer, work, "train")
    tr = H.legacy_trainer(cfg, tokenizer, mgr)
    out_dir = os.path.join(work, "out")
    rollout_dir = os.path.join(out_dir, "rollout")
    prompt_length = cfg.actor_rollout_ref.rollout.prompt_length
    it = iter(dl)
    rows, generated, files = [], {}, {}
    for step in range(1, STEPS + 1):
        SkipManager.set_step(step)
        batch, reward_extra, timing_raw, _ = loop.run_until_complete(
            H.legacy_batch(tr, it, llm, step)
        )
        adv = H.grpo_and_rloo(batch, cfg)
        per_token = {est: token_advantages(batch, cfg, est) for est in TOKEN_ESTIMATORS}
        tr._log_rollout_data(batch, reward_extra, timing_raw, rollout_dir)
        tr._shutdown_dump_executor()
        tr._init_dump_executor()
        name = f"rollout/{step}.jsonl"
        lines = H.lines_of(os.path.join(out_dir, name))
        assert len(lines) == len(batch)
        entries = []
        for i, uid in enumerate(batch.non_tensor_batch["uid"]):
            prompt, response = unpadded(batch, i, prompt_length)
            assert json.loads(lines[i])["output"] == tokenizer.decode(
                response, skip_special_tokens=True
            )
            real = batch.batch["attention_mask"][i][prompt_length:].bool()
            entries.append({"uid": str(uid), "prompt_ids": prompt, "response_ids": response,
                            "response_length": len(response),
                            "response_mask": batch.batch["response_mask"][i][real].tolist(),
                            "rollout_log_probs": batch.batch["rollout_log_probs"][i][
                                real].tolist()})  # fmt: skip
            rows.append({"file": name, "line": i + 1, "uid": str(uid),
                         "score": float(batch.batch["token_level_scores"][i].sum()),
                         "grpo_advantage": adv["grpo"][i],
                         **{f"{est}_advantages": per_token[est][i]
                            for est in TOKEN_ESTIMATORS}})  # fmt: skip
        generated[name] = entries
        files[name] = {"lines": len(lines), "json_types": H.json_types(os.path.join(out_dir, name))}
    loop.close()
    for folder, _, names in sorted(os.walk(skip_dir)):
        for part in sorted(names):
            name = os.path.relpath(os.path.join(folder, part), os.path.dirname(skip_dir))
            os.makedirs(os.path.dirname(os.path.join(out_dir, name)), exist_ok=True)
            shutil.copyfile(os.path.join(folder, part), os.path.join(out_dir, name))
            files[name] = {"lines": 0}
    with open(os.path.join(out_dir, "generated_ids.json"), "w") as fh:
        json.dump(generated, fh)
        fh.write("\n")
    truth = {
        "made_by": "tools/dumps/verl_tokens.py",
        "framework": "verl 0.9.1",
        "versions": H.versions(),
        "case": case,
        "description": " ".join(__doc__.split("What lands")[0].split()),
        "settings": {
            **H.COMMON,
            "trainer": "legacy",
            "n": N,
            "train_batch_size": PROMPTS_PER_STEP,
            "steps": STEPS,
            "balance_batch": True,
            "response_length": response_length,
            "agent_loop": agent_loop,
            "reward_fn": "compute_score_float",
            "skip.rollout": {
                "enable": True,
                "steps": list(range(1, STEPS + 1)),
                "dump_dir": "skip",
            },
        },
        "seed": seed,
        "eos_generated": "<|im_end|>",
        "files": files,
        "rows": rows,
    }
    return out_dir, truth


def write_fixture(case, out_dir, truth, tokenizer_dir, dest_root):
    dest = os.path.join(dest_root, case)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    for f in [*truth["files"], "generated_ids.json"]:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copyfile(os.path.join(out_dir, f), os.path.join(dest, f))
    shutil.copytree(tokenizer_dir, os.path.join(dest, "tokenizer"))
    with open(os.path.join(dest, "truth.json"), "w") as fh:
        json.dump(truth, fh, indent=1)
        fh.write("\n")


def main():
    ap = argparse.ArgumentParser(description="Write a real verl 0.9.1 dump with its token ids.")
    ap.add_argument("outdir", help="scratch folder; each case runs in OUTDIR/<case>")
    ap.add_argument(
        "--fixtures",
        default=os.path.join(
            os.path.dirname(os.path.dirname(_HERE)), "tests", "fixtures", "real", "verl"
        ),
    )
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    H = load_helpers()
    define_observation_loop()
    for case in args.cases.split(","):
        work = os.path.join(args.outdir, case)
        if os.path.exists(work):
            shutil.rmtree(work)
        os.makedirs(work)
        out_dir, truth = run_tokens_case(H, case, work, SEED + list(CASES).index(case))
        tokenizer_dir = os.path.join(work, "model", "tokenizer")
        write_fixture(case, out_dir, truth, tokenizer_dir, args.fixtures)
        print(f"[verl_tokens.py] {case}: " + ", ".join(truth["files"]))


if __name__ == "__main__":
    main()
