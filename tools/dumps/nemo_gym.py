"""Write real NeMo-Gym rollout-collection outputs (``rollouts.jsonl`` and more) as test fixtures.

NeMo-Gym runs every part of a rollout as an HTTP server (FastAPI): the rollout collector POSTs
each row to an environment server's ``/run``, which relays it to an agent server, which calls a
model server (``/v1/responses``) and a resources server (``/seed_session``, ``/verify``). Here all
of those servers are NeMo-Gym's own classes, built from NeMo-Gym's own config files, and run
in this one process; only the network and the LLM are stood in.

What runs unchanged (all from the ``nemo-gym==0.7.0`` wheel on PyPI):

* config: ``nemo_gym.global_config.GlobalConfigDictParser().parse`` over the shipped
  ``resources_servers/string_match/configs/string_match.yaml`` (resources server ``string_match``,
  agent ``string_match_simple_agent`` = ``responses_api_agents/simple_agent``, environment server
  ``string_match_environment_server`` = ``environment_servers/legacy_agent``) and
  ``responses_api_models/vllm_model/configs/vllm_model_for_training.yaml`` (``policy_model`` =
  ``responses_api_models/vllm_model`` with ``return_token_id_information: true``, the setting
  NeMo-RL trains with);
* the four servers: each class (``StringMatchResourcesServer``, ``SimpleAgent``, ``VLLMModel``,
  ``LegacyAgentEnvironmentServer``) is built as ``SimpleServer.run_webserver`` builds it
  (``load_config_from_global_config``, ``setup_webserver``, ``setup_liveness``,
  ``setup_exception_middleware``, ``setup_cancellation_middleware``, the validation handler),
  without ``uvicorn.run``;
* ``nemo_gym.rollout_collection.RolloutCollectionHelper().run_from_config`` with a
  ``RolloutCollectionConfig`` (``agent_name``, ``input_jsonl_fpath``, ``output_jsonl_fpath``,
  ``num_repeats=4``, ``num_repeats_add_seed=True``): it writes ``rollouts.jsonl``,
  ``rollouts_materialized_inputs.jsonl``, ``rollouts_failures.jsonl``,
  ``rollouts_aggregate_metrics.json`` (through the agent's ``/aggregate_metrics``) and runs the
  rollout health checks (``rollout_verdicts.jsonl``, ``quality_summary.json``);
* reward profiling: ``nemo_gym.cli.eval.reward_profile`` (the ``gym eval reward-profile``
  command) on those files: it writes ``rollouts_reward_profiling.jsonl``,
  ``rollouts_agent_metrics.json`` and ``rollouts_repeat_level_metrics.json``.

What is stood in (not NeMo-Gym code):

* the network: ``nemo_gym.server_utils._GLOBAL_AIOHTTP_CLIENT`` (the one aiohttp
  ``ClientSession`` all of Gym's HTTP goes through, via ``server_utils.request``) is an
  ``InProcessSession`` that hands each request to the addressed FastAPI app through
  ``httpx.ASGITransport`` and wraps the reply in an aiohttp-like response (status, body, headers,
  cookies). Server ports are fixed here (the parser would pick free ones);
* the LLM: ``vllm_model``'s upstream ``base_url`` points at ``stub_vllm``, a FastAPI app with
  vLLM's ``/v1/chat/completions`` (``logprobs.content[].token`` = ``"token_id:<id>"``, as vLLM
  answers ``return_tokens_as_token_ids``) and ``/tokenize`` (chat-templated prompt ids). It
  tokenizes with a word-level tokenizer built here (``tokenizers.models.WordLevel`` in
  ``transformers.PreTrainedTokenizerFast``) and answers from an RNG seeded by (SEED, prompt,
  the per-rollout ``seed`` that ``num_repeats_add_seed`` puts in the request), so answers do not
  depend on scheduling; it waits a scripted time per rollout before answering, so rollouts
  finish in a fixed order that is not input order;
* ``uuid4`` in ``nemo_gym.responses_converter`` / ``server_utils`` /
  ``base_responses_api_model`` (response, message and session ids) draws from a seeded RNG, one
  per module.

Versions that ran: Python 3.13.0 (nemo-gym 0.7.0 declares ``Requires-Python >=3.13.14``; installed
with ``--ignore-requires-python``), nemo-gym 0.7.0, fastapi, httpx, aiohttp, pandas, scipy,
transformers, tokenizers (see ``versions`` in truth.json). Only the packages that the imports
need are installed (``ray`` without its dependencies: ``global_config`` only reads its version).

How to run::

    /root/.pyenv/versions/3.13.0/bin/python -m venv /tmp/fw/nemo-gym
    /tmp/fw/nemo-gym/bin/pip download --no-deps nemo-gym==0.7.0 --python-version 3.13.14 \
        --only-binary=:all: -d /tmp/fw/dl
    /tmp/fw/nemo-gym/bin/pip install --no-deps --ignore-requires-python \
        /tmp/fw/dl/nemo_gym-0.7.0-py3-none-any.whl
    /tmp/fw/nemo-gym/bin/pip install --no-deps ray
    /tmp/fw/nemo-gym/bin/pip install openai==2.44.0 "anthropic<=0.109.2" tqdm pydantic devtools \
        packaging fastapi "mcp>=1.28.1,<2" "anyio>=4.15.1" itsdangerous uvicorn httptools uvloop \
        hydra-core omegaconf rich "aiohttp>=3.14.4" jinja2 psutil "orjson>=3.11.6" requests \
        python-multipart pyyaml scipy yappi pydot pandas wandb transformers tokenizers
    /tmp/fw/nemo-gym/bin/python tools/dumps/nemo_gym.py OUTDIR   # e.g. tests/fixtures/real/nemo-gym

Each case folder ``OUTDIR/<case>/`` holds ``input.jsonl`` (the collector's
``input_jsonl_fpath``), everything NeMo-Gym wrote next to ``output_jsonl_fpath =
<case>/rollouts.jsonl``, and ``truth.json``.
"""

import asyncio
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import sys
import tempfile
import uuid
from http.cookies import SimpleCookie
from importlib import metadata
from pathlib import Path

# this file is itself named nemo_gym.py: keep its folder off sys.path so that ``import nemo_gym``
# finds NeMo-Gym, not this script (once dumpkit, beside it, is imported)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import dumpkit  # noqa: E402

dumpkit.leave_folder(__file__)

SEED = 20260902
MODEL = "tiny-qwen"
VLLM_HOST = "stub-vllm.invalid"
VLLM_PORT = 8000
PORTS = {  # fixed ports for the servers (in-process: nothing listens on them)
    "head_server": 11000,
    "string_match": 12001,
    "string_match_simple_agent": 12002,
    "string_match_environment_server": 12003,
    "policy_model": 12004,
}
NUM_REPEATS = 4
DELAY_STEP_S = 0.06  # the stand-in model answers rollout k after DELAY[k] * DELAY_STEP_S

# ---------------------------------------------------------------- tokenizer (built locally)
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_WORDS_TEXT = (
    "what is plus minus times equals the answer so i think it , . ? no put final in "
    "you are a helpful assistant \\ boxed { } : my"
)
WORDS = NUMBERS + _WORDS_TEXT.split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <eos> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
_TOKENIZER = None


def build_tokenizer(folder: str):
    return dumpkit.save_chat_tokenizer(folder, SPECIALS, WORDS, CHAT_TEMPLATE)


def tok():
    assert _TOKENIZER is not None
    return _TOKENIZER


# ---------------------------------------------------------------- the data (3 tasks)
def question(a: int, b: int) -> tuple[str, str]:
    return (
        f"what is {NUMBERS[a]} plus {NUMBERS[b]} ? put the final answer in \\boxed{{}} .",
        NUMBERS[a + b],
    )


def task_row(a: int, b: int) -> dict:
    text, answer = question(a, b)
    return {
        "responses_create_params": {
            "input": [
                {
                    "role": "user",
                    "type": "message",
                    "content": [{"type": "input_text", "text": text}],
                }
            ]
        },
        "expected_answer": answer,
        "extraction_mode": "boxed",
        "case_sensitive": False,
    }


# per question: the stand-in model's chance of a right boxed answer, and of no \boxed{} at all
SKILL = {
    question(2, 3)[0]: (0.35, 0.2),
    question(1, 1)[0]: (1.0, 0.0),  # always right: the task whose four rewards are equal
    question(4, 2)[0]: (0.4, 0.3),
}
CASES = {
    "default": (
        [task_row(2, 3), task_row(1, 1), task_row(4, 2)],
        "3 tasks x num_repeats 4 (num_repeats_add_seed=True) through string_match_simple_agent "
        "(simple_agent + string_match, boxed extraction) and policy_model (vllm_model, "
        "return_token_id_information=true). Task 1's four rewards are all 1.0. The stand-in "
        "model finishes rollouts in a scripted order, so rollouts.jsonl (written as rollouts "
        "complete) is not in task order.",
    ),
    "duplicate-rows": (
        [task_row(2, 3), task_row(1, 1), task_row(2, 3)],
        "as default, but input lines 0 and 2 are identical: NeMo-Gym gives identical input rows "
        "the same _ng_task_index (rollout_collection._preprocess_raw_rows dedupes on the row's "
        "JSON), so task 0 has 8 rollouts (_ng_rollout_index 0..7, seeds 0..7) and there are "
        "only two task indices.",
    ),
}


# ---------------------------------------------------------------- stand-in vLLM (FastAPI)
def _message_text(content) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content or [])


def prompt_ids(messages: list[dict]) -> list[int]:
    msgs = [{"role": m["role"], "content": _message_text(m.get("content"))} for m in messages]
    ids = tok().apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    return list(ids)


def make_stub_vllm(calls: list, delays: dict):
    from fastapi import FastAPI, Request

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await request.json()
        calls.append({"endpoint": "/v1/chat/completions", "body": body})
        messages = body["messages"]
        text = _message_text(messages[-1]["content"])
        seed = body.get("seed")
        key = f"{SEED}|{text}|{seed}"
        rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
        a, b = re.findall(r"what is (\w+) plus (\w+) \?", text)[-1]
        truth = NUMBERS[NUMBERS.index(a) + NUMBERS.index(b)]
        p_right, p_nobox = SKILL[text]
        filler = rng.choice(["", "so", "i think", "my answer :"])
        u = rng.random()
        if u < p_right:
            words = f"{filler} the answer is \\boxed{{{truth}}}"
        elif u < p_right + p_nobox:
            words = f"{filler} i think it is {rng.choice(NUMBERS)}"
        else:
            wrong = rng.choice([w for w in NUMBERS if w != truth])
            words = f"{filler} the answer is \\boxed{{{wrong}}}"
        words = words.strip()
        gen = tok().encode(words, add_special_tokens=False) + [tok().eos_token_id]
        lps = [round(-rng.uniform(0.01, 2.5), 4) for _ in gen]
        await asyncio.sleep(delays.get((text, seed), 0) * DELAY_STEP_S)
        n_prompt = len(prompt_ids(messages))
        return {
            "id": f"chatcmpl-{hashlib.sha256(key.encode()).hexdigest()[:16]}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": words, "reasoning_content": None},
                    "finish_reason": "stop",
                    "logprobs": {
                        "content": [
                            {
                                "token": f"token_id:{t}",
                                "logprob": lp,
                                "bytes": None,
                                "top_logprobs": [],
                            }
                            for t, lp in zip(gen, lps, strict=True)
                        ]
                    },
                }
            ],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": len(gen),
                "total_tokens": n_prompt + len(gen),
            },
        }

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await request.json()
        calls.append({"endpoint": "/tokenize", "body": body})
        ids = prompt_ids(body["messages"])
        return {"tokens": ids, "count": len(ids), "max_model_len": 4096}

    return app


# ---------------------------------------------------------------- in-process transport
class _Content:
    def __init__(self, data: bytes):
        self._data = data

    async def read(self) -> bytes:
        return self._data


class InProcessResponse:
    """The parts of ``aiohttp.ClientResponse`` that NeMo-Gym reads."""

    def __init__(self, method: str, url: str, r):
        from aiohttp import RequestInfo
        from multidict import CIMultiDict, CIMultiDictProxy
        from yarl import URL

        self.status = r.status_code
        self.ok = r.status_code < 400
        self.reason = r.reason_phrase
        self._body = r.content
        self.content = _Content(r.content)
        self.headers = CIMultiDictProxy(CIMultiDict(r.headers.multi_items()))
        self.cookies = SimpleCookie()
        for value in r.headers.get_list("set-cookie"):
            self.cookies.load(value)
        self.request_info = RequestInfo(URL(url), method, CIMultiDictProxy(CIMultiDict()), URL(url))

    async def read(self) -> bytes:
        return self._body

    async def json(self, **kwargs):
        return json.loads(self._body)

    async def text(self, **kwargs) -> str:
        return self._body.decode()

    def release(self) -> None:
        pass

    def raise_for_status(self) -> None:
        from aiohttp import ClientResponseError

        if not self.ok:
            raise ClientResponseError(
                self.request_info, (), status=self.status, message=self.reason, headers=self.headers
            )


class InProcessSession:
    """Stands in for Gym's global ``aiohttp.ClientSession``: routes by host:port to ASGI apps."""

    closed = False

    def __init__(self, apps: dict):
        self.apps = apps

    async def request(self, method: str, url: str, **kw):
        import httpx

        u = httpx.URL(url)
        app = self.apps[f"{u.host}:{u.port}"]
        headers = dict(kw.pop("headers", None) or {})
        cookies = kw.pop("cookies", None)
        if cookies:
            items = cookies.items() if hasattr(cookies, "items") else cookies
            jar = {k: getattr(v, "value", v) for k, v in items}
            if jar:
                headers["cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url=f"http://{u.host}:{u.port}"
        ) as c:
            r = await c.request(
                method,
                str(u),
                content=kw.pop("data", None),
                json=kw.pop("json", None),
                params=kw.pop("params", None),
                headers=headers,
            )
        return InProcessResponse(method, url, r)

    async def close(self) -> None:
        pass


# ---------------------------------------------------------------- NeMo-Gym setup
def seeded_uuid4(seed: int):
    rng = random.Random(seed)

    def uuid4():
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    return uuid4


def build_global_config(root: Path):
    from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
    from omegaconf import DictConfig

    init = DictConfig(
        {
            "config_paths": [
                "resources_servers/string_match/configs/string_match.yaml",
                "responses_api_models/vllm_model/configs/vllm_model_for_training.yaml",
            ],
            "policy_base_url": f"http://{VLLM_HOST}:{VLLM_PORT}/v1",
            "policy_api_key": "EMPTY",
            "policy_model_name": MODEL,
        }
    )
    cfg = GlobalConfigDictParser().parse(
        GlobalConfigDictParserConfig(
            initial_global_config_dict=init, skip_load_from_cli=True, skip_load_from_dotenv=True
        )
    )
    cfg["head_server"]["port"] = PORTS["head_server"]
    for name, port in PORTS.items():
        if name == "head_server":
            continue
        (stype,) = list(cfg[name].keys())
        (impl,) = list(cfg[name][stype].keys())
        cfg[name][stype][impl]["port"] = port
    cfg["disallowed_ports"] = sorted(PORTS.values())
    return cfg


def build_server(root: Path, cfg, top_name: str):
    import nemo_gym.global_config as gc
    from fastapi.exceptions import RequestValidationError
    from nemo_gym import server_utils

    (stype,) = list(cfg[top_name].keys())
    (impl,) = list(cfg[top_name][stype].keys())
    inst = cfg[top_name][stype][impl]
    path = root / stype / impl / inst["entrypoint"]
    spec = importlib.util.spec_from_file_location(f"nemo_gym_server_{top_name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    classes = [
        v
        for v in vars(mod).values()
        if isinstance(v, type)
        and issubclass(v, server_utils.SimpleServer)
        and v.__module__ == mod.__name__
    ]
    (cls,) = [c for c in classes if not getattr(c, "__abstractmethods__", None)][-1:]
    os.environ[gc.NEMO_GYM_CONFIG_PATH_ENV_VAR_NAME] = top_name
    server = cls(
        config=cls.load_config_from_global_config(),
        server_client=server_utils.ServerClient(
            head_server_config=server_utils.ServerClient.load_head_server_config(),
            global_config_dict=cfg,
        ),
    )
    # as SimpleServer.run_webserver does, minus uvicorn.run
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    server.setup_cancellation_middleware(app)
    app.exception_handler(RequestValidationError)(server_utils._validation_exception_handler)
    return f"{inst['host']}:{inst['port']}", app, cls.__name__


def run_case(case_dir: Path, rows: list[dict]) -> dict:
    import nemo_gym
    import nemo_gym.base_responses_api_model as brm
    import nemo_gym.global_config as gc
    import nemo_gym.responses_converter as rc
    from nemo_gym import server_utils
    from nemo_gym.rollout_collection import RolloutCollectionConfig, RolloutCollectionHelper

    root = Path(nemo_gym.__file__).resolve().parent.parent
    # one seeded stream per module: session ids (server_utils) are drawn as requests arrive,
    # response / message ids (responses_converter) as the model answers (a fixed order here)
    for i, mod in enumerate((rc, brm, server_utils)):
        mod.uuid4 = seeded_uuid4(SEED + i)
    cfg = build_global_config(root)
    gc._GLOBAL_CONFIG_DICT = cfg
    os.environ[gc.NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME] = "set in-process (tools/dumps/nemo_gym.py)"

    # the order in which the stand-in model answers: a fixed permutation of the rollouts
    texts = [r["responses_create_params"]["input"][0]["content"][0]["text"] for r in rows]
    per_text: dict[str, int] = {}
    keys = []
    for t in texts:
        for _ in range(NUM_REPEATS):
            keys.append((t, per_text.get(t, 0)))  # (prompt, seed = rollout index)
            per_text[t] = per_text.get(t, 0) + 1
    order = list(range(len(keys)))
    random.Random(SEED).shuffle(order)
    delays = {k: order[i] for i, k in enumerate(keys)}

    calls: list = []
    apps = {f"{VLLM_HOST}:{VLLM_PORT}": make_stub_vllm(calls, delays)}
    server_classes = {}
    for name in PORTS:
        if name == "head_server":
            continue
        addr, app, cls_name = build_server(root, cfg, name)
        apps[addr] = app
        server_classes[name] = cls_name
    server_utils._GLOBAL_AIOHTTP_CLIENT = InProcessSession(apps)

    inp = case_dir / "input.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = case_dir / "rollouts.jsonl"
    config = RolloutCollectionConfig(
        agent_name="string_match_simple_agent",
        input_jsonl_fpath=str(inp),
        output_jsonl_fpath=str(out),
        num_repeats=NUM_REPEATS,
        num_repeats_add_seed=True,
    )
    cwd = os.getcwd()
    os.chdir(case_dir)  # nothing should land in the caller's folder (all outputs are absolute)
    try:
        asyncio.run(RolloutCollectionHelper().run_from_config(config))
        # reward profiling: `gym eval reward-profile` reads its config from the global config
        from nemo_gym.cli.eval import reward_profile
        from omegaconf import DictConfig

        gc._GLOBAL_CONFIG_DICT = DictConfig(
            {
                "materialized_inputs_jsonl_fpath": str(
                    case_dir / "rollouts_materialized_inputs.jsonl"
                ),
                "rollouts_jsonl_fpath": str(out),
            }
        )
        reward_profile()
    finally:
        os.chdir(cwd)
    return {"server_classes": server_classes, "model_calls": calls}


def versions_info() -> dict:
    out = {"python": sys.version.split()[0]}
    for pkg in [
        "nemo-gym",
        "fastapi",
        "httpx",
        "aiohttp",
        "pandas",
        "scipy",
        "transformers",
        "tokenizers",
    ]:
        out[pkg] = metadata.version(pkg)
    return out


def main(outdir: str) -> None:
    global _TOKENIZER
    outdir = Path(outdir).resolve()
    tok_tmp = tempfile.mkdtemp(prefix="nemo_gym_tok_")
    _TOKENIZER = build_tokenizer(tok_tmp)
    for case, (rows, desc) in CASES.items():
        case_dir = outdir / case
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir(parents=True)
        info = run_case(case_dir, rows)
        lines = [json.loads(x) for x in (case_dir / "rollouts.jsonl").read_text().splitlines()]
        truth_rows = []
        for n, r in enumerate(lines, 1):
            msgs = [o for o in r["response"]["output"] if o.get("type") == "message"]
            truth_rows.append(
                {
                    "line": n,
                    "task_index": r["_ng_task_index"],
                    "rollout_index": r["_ng_rollout_index"],
                    "reward": r["reward"],
                    "seed": json.loads(r["responses_create_params"]["metadata"]["extra_body"])[
                        "seed"
                    ],
                    "extracted_answer": r.get("extracted_answer"),
                    "expected_answer": r.get("expected_answer"),
                    "n_generation_tokens": sum(len(m["generation_token_ids"]) for m in msgs),
                }
            )
        groups: dict[int, list[float]] = {}
        for t in sorted(truth_rows, key=lambda t: (t["task_index"], t["rollout_index"])):
            groups.setdefault(t["task_index"], []).append(t["reward"])
        truth = {
            "made_by": "tools/dumps/nemo_gym.py",
            "framework": "NeMo-Gym 0.7.0 (PyPI), servers in-process, LLM stood in",
            "versions": versions_info(),
            "case": case,
            "description": desc,
            "settings": {
                "agent_name": "string_match_simple_agent",
                "num_repeats": NUM_REPEATS,
                "num_repeats_add_seed": True,
                "servers": info["server_classes"],
                "model_server_config": "vllm_model_for_training.yaml: return_token_id_information "
                "true, request_prompt_and_generation_token_ids false, uses_reasoning_parser true",
                "grouping": "_ng_task_index (one task = one distinct input row); "
                "_ng_rollout_index numbers a task's repeats from 0",
                "line_order": "rollouts.jsonl is appended as rollouts complete (asyncio "
                "as_completed), not sorted; NeMo-Gym sorts by (task, rollout) only in memory",
                "token_ids": "response.output[] items of type 'message' (assistant) carry "
                "prompt_token_ids (the chat-templated prompt, from vLLM's /tokenize), "
                "generation_token_ids and generation_log_probs (from the choice's logprobs), "
                "written by vllm_model because return_token_id_information is true; the "
                "top-level record has none",
                "advantage": "NeMo-Gym computes no advantage (a trainer such as NeMo-RL does); "
                "rows carry the reward only",
                "line_numbers": "1-based",
            },
            "group_rewards_by_task": {str(k): v for k, v in groups.items()},
            "rows": truth_rows,
        }
        (case_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{case}: {len(truth_rows)} rows -> {case_dir}")
    shutil.rmtree(tok_tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: nemo_gym.py OUTDIR")
    main(sys.argv[1])
    sys.stdout.flush()
    os._exit(0)
