"""``--from prime-rl`` on the trace stream (PRs #3444, #3465) as prime-rl's own file-monitor
code wrote it (``tools/dumps/prime_rl_stream.py``): chunks plain and sealed, annotations folded
by trace id, newest wins; against the advantages prime-rl's GRPO gave each trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import one_line
from tests.presets.test_real_dumps import REAL, run

PRIME = REAL / "prime-rl"


def _annotated(tmp_path: Path, inputs: Path) -> tuple[list[dict], dict]:
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(inputs), "--from", "prime-rl", "--method", "grpo",
               "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return pq.read_table(out).to_pylist(), json.loads(proc.stdout)


def _truth(case: str) -> list[dict]:
    return json.loads((PRIME / case / "truth.json").read_text())["rows"]


def _sampled(row: dict) -> list[float]:
    return [a for a, m in zip(row["source_advantages"], row["action_mask"], strict=True) if m]


def test_check_on_the_stream_reproduces_prime_rls_advantages() -> None:
    """Groups with a shipped trace, and the complete group of one reward prime-rl never
    shipped, are read (24 of 26 traces); the step-3 group still in flight is left out, said.
    The 13 traces prime-rl shipped are compared; the 11 it never annotated (an advantage of
    0, which it does not ship) have no logged value, said."""
    proc = run("check", str(PRIME / "stream"), "--from", "prime-rl", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["rows"] == 13 and result["max_abs_difference"] <= 1e-6
    assert any("left out 1 group(s) (2 episode(s))" in w for w in result["warnings"])
    assert "11 row(s) have no logged advantage (prime-rl had not shipped them, or left them " \
           "out): not compared" in result["warnings"]  # fmt: skip
    in_flight = {t["group_id"] for t in _truth("stream") if t["arrival_step"] == 3}
    assert len(in_flight) == 1


def test_the_stream_reads_each_trace_with_its_folded_advantages(tmp_path: Path) -> None:
    rows, _ = _annotated(tmp_path, PRIME / "stream")
    truth = {(t["episode_id"], t["trace_index"]): t for t in _truth("stream")}
    assert len(rows) == 24
    for row in rows:
        episode, trace, _leaf = row["rollout_id"].split("/")
        expected = truth[(episode, int(trace))]["computed"]
        assert row["prompt_id"] == truth[(episode, int(trace))]["group_id"]
        assert row["effective"] == (not expected["zero_advantage"])
        if expected["zero_advantage"]:  # never annotated: no logged value
            assert all(a is None for a in _sampled(row))
            continue
        assert _sampled(row) == pytest.approx(
            [a for k in sorted(expected["node_advantages"], key=int)
             for a in expected["node_advantages"][k]], abs=1e-7)  # fmt: skip


def test_annotations_fold_newest_wins(tmp_path: Path) -> None:
    """Two producers (orchestrator, trainer), one trace stamped twice: its second stamp's
    advantages and step are read; an info-only update keeps the first per-token values."""
    rows, _ = _annotated(tmp_path, PRIME / "stream_multi_annotation")
    by_trace = {(t["episode_id"], t["trace_index"]): t["folded"]
                for t in _truth("stream_multi_annotation")}  # fmt: skip
    restamped = 0
    for row in rows:
        episode, trace, _leaf = row["rollout_id"].split("/")
        folded = by_trace[(episode, int(trace))]
        nodes = folded["node_advantages"]
        assert _sampled(row) == [a for k in sorted(nodes, key=int) for a in nodes[k]]
        assert row["step"] == folded["ship_step"]
        restamped += folded["ship_step"] == 2
    assert restamped == 1 and len(rows) == 7  # the failed trace has no tokens


def test_the_trainers_log_probs_are_folded_beside_the_samplers(tmp_path: Path) -> None:
    """The trainer's annotations (``trainer_logprobs``, rounded to 4 decimals, null off the
    loss mask) become the trainer's stream, on the same tokens as the sampler's ``logprobs``:
    at each sampled token, the values prime-rl's own fold gives its node."""
    rows, _ = _annotated(tmp_path, PRIME / "stream_multi_annotation")
    by_trace = {(t["episode_id"], t["trace_index"]): t["folded"]
                for t in _truth("stream_multi_annotation")}  # fmt: skip
    for row in rows:
        episode, trace, _leaf = row["rollout_id"].split("/")
        nodes = by_trace[(episode, int(trace))]["node_trainer_logprobs"]
        sampled = [m == 1 for m in row["action_mask"]]
        trainer = [v for v, m in zip(row["trainer_logprobs"], sampled, strict=True) if m]
        assert trainer == pytest.approx([v for k in sorted(nodes, key=int) for v in nodes[k]],
                                        abs=1e-7)  # fmt: skip
        sampler = [v for v, m in zip(row["logprobs"], sampled, strict=True) if m]
        assert len(sampler) == len(trainer) and sampler != trainer
        assert all(v == 0 for v, m in zip(row["trainer_logprobs"], sampled, strict=True) if not m)
    # by hand, the first trace's annotation (trainer/00000.jsonl, line 2): its sampled tokens
    # are the branch's last 9, 22 to 30
    first = next(r for r in rows if r["rollout_id"].startswith("ad000eac13f349c0bbb0d683c286c20e"))
    assert first["trainer_logprobs"][22:25] == pytest.approx([-1.9704, -1.1442, -1.3155])
    proc = run("schema", str(PRIME / "stream"), "--from", "prime-rl", "--json")
    assert proc.returncode == 0, proc.stderr  # no trainer annotations: no trainer column
    assert json.loads(proc.stdout)["logprob_streams"]["trainer"] is None


@pytest.mark.parametrize("live", ["stream/00004.jsonl", "annotations/orch/00000.jsonl"])
def test_a_live_chunk_cut_inside_a_line_reads_the_whole_lines(tmp_path: Path, live: str) -> None:
    """The chunk a running job writes may end inside a line, an episode's or an annotation's:
    its whole lines are read, and the cut one left out, said."""
    run_dir = tmp_path / "run"
    shutil.copytree(PRIME / "stream", run_dir)
    chunk = run_dir / "monitors" / "file" / "traces" / live
    chunk.write_bytes(chunk.read_bytes() + b'{"id": "torn", "traces": [{"no')
    rows, summary = _annotated(tmp_path, run_dir / "monitors" / "file")
    assert len(rows) == 24
    assert (
        f"{chunk}: its last line is cut short (the run was writing it): left out"
        in (summary["warnings"])
    )


def test_an_annotation_for_a_branch_the_trace_lacks_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(PRIME / "stream", run_dir)
    orch = run_dir / "monitors" / "file" / "traces" / "annotations" / "orch" / "00000.jsonl"
    first, *rest = orch.read_text().splitlines(keepends=True)
    update = json.loads(first)
    update["branches"][0]["index"] = 3
    orch.write_text(json.dumps(update) + "\n" + "".join(rest))
    proc = run("annotate", str(run_dir), "--from", "prime-rl", "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert f"{update['trace_id']}'s annotation names branch 3" in proc.stderr


def test_grpo_length_is_prime_rls_linear_length_penalty(tmp_path: Path) -> None:
    """prime-rl@559b447's own score_group (run unchanged, tools/dumps/prime_rl_length.py) on
    two groups of rollouts with their token and turn counts: its weights and none."""
    groups = json.loads((PRIME / "length_penalty" / "rollouts.json").read_text())["groups"]
    rollouts = [(g["example_id"], r) for g in groups for r in g["rollouts"]]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({
        "prompt_id": g, "reward": r["reward"], "num_output_tokens": r["completion_tokens"],
        "num_input_tokens": r["num_total_tokens"] - r["completion_tokens"],
        "num_turns": r["turns"]}) + "\n" for g, r in rollouts))  # fmt: skip
    cases = {
        "linear@559b4477/defaults(0.25,0.1,0.1)": [],
        "linear@559b4477/none": ["--output-tokens-weight", "0", "--input-tokens-weight", "0",
                                 "--turns-weight", "0"],
    }  # fmt: skip
    for case, options in cases.items():
        out = tmp_path / "out.parquet"
        proc = run("annotate", str(log), "--method", "grpo-length", "--convention", "prime-rl",
                   *options, "--out", str(out), "--force")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        got = pq.read_table(out).column("advantage").to_pylist()
        assert got == pytest.approx([r["advantage"][case] for _, r in rollouts], abs=1e-6)


def test_the_stream_gives_grpo_length_its_costs(tmp_path: Path) -> None:
    rows, _ = _annotated(tmp_path, PRIME / "stream")
    truth = {(t["episode_id"], t["trace_index"]): t for t in _truth("stream")}
    for row in rows:
        episode, trace, _leaf = row["rollout_id"].split("/")
        sampled = truth[(episode, int(trace))]["sampled_nodes"]
        assert row["num_turns"] == len(sampled) and row["num_output_tokens"] > 0
        assert row["num_input_tokens"] > 0


def test_an_annotation_of_the_wrong_length_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(PRIME / "stream", run_dir)
    orch = run_dir / "monitors" / "file" / "traces" / "annotations" / "orch" / "00000.jsonl"
    first, *rest = orch.read_text().splitlines(keepends=True)
    update = json.loads(first)
    tokens = len(update["branches"][0]["advantages"])
    update["branches"][0]["advantages"].pop()
    orch.write_text(json.dumps(update) + "\n" + "".join(rest))
    proc = run("annotate", str(run_dir), "--from", "prime-rl", "--method", "grpo",
               "--out", str(tmp_path / "o.parquet"))  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert (f"{update['trace_id']}'s annotation gives {tokens - 1} advantages for a branch of "
            f"{tokens} tokens") in proc.stderr  # fmt: skip


def test_grpo_length_names_a_missing_count_and_a_negative_weight(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"prompt_id": 0, "reward": float(i), "num_output_tokens":
                   None if i == 2 else 10, "num_input_tokens": 5, "num_turns": 1}) + "\n"
                   for i in range(4)))  # fmt: skip
    out = str(tmp_path / "o.parquet")
    proc = run("annotate", str(log), "--method", "grpo-length", "--out", out)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert f"{log}: line 3, column 'num_output_tokens': expected a count >= 0" in proc.stderr
    proc = run("annotate", str(log), "--method", "grpo-length", "--turns-weight", "-1",
               "--out", out)  # fmt: skip
    assert proc.returncode == 2
    assert "--turns-weight -1.0: expected a number >= 0" in proc.stderr


def test_turn_rewards_are_kept_per_sampled_turn(tmp_path: Path) -> None:
    """``info.turn_rewards`` (prime-rl's turn-credit branch: one per sampled turn) become the
    row's ``turn_rewards``; agentic-reinforce (γ = 1, no normalisation) then gives turn k the
    rewards of turns k and after plus the trace's reward. A list that does not hold one reward
    per sampled turn is left out, said."""
    run_dir = tmp_path / "run"
    shutil.copytree(PRIME / "default", run_dir)
    file = run_dir / "rollouts" / "step_2" / "train" / "effective" / "traces.jsonl"
    episodes = [json.loads(line) for line in file.read_text().splitlines()]
    two_turns = one_turn = 0
    for episode in episodes:
        for trace in episode["traces"]:
            turns = sum(bool(node.get("sampled")) for node in trace["nodes"])
            if turns == 2:
                trace["info"]["turn_rewards"], two_turns = [0.25, 1.0], two_turns + 1
            elif not one_turn:
                trace["info"]["turn_rewards"], one_turn = [0.5, 0.5], 1  # one too many
    assert two_turns and one_turn
    file.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    out = tmp_path / "out.parquet"
    proc = run("annotate", str(file), "--from", "prime-rl", "--method", "agentic-reinforce",
               "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert any("1 rollout(s) have no turn rewards kept" in w for w in warnings), warnings
    kept = [r for r in pq.read_table(out).to_pylist() if r["turn_rewards"] is not None]
    assert len(kept) == two_turns
    for row in kept:
        turn_values = sorted({a for a, m in zip(row["advantages"], row["action_mask"],
                                                strict=True) if m})  # fmt: skip
        assert turn_values == pytest.approx(sorted([row["reward"] + 1.25, row["reward"] + 1.0]))


def _lines(path: Path) -> list[bytes]:
    """A chunk's lines, whichever its form."""
    data = path.read_bytes()
    if path.suffix == ".zst":
        data = pytest.importorskip("zstandard").ZstdDecompressor().decompressobj().decompress(data)
    return data.splitlines(keepends=True)


def _seal(lines: list[bytes]) -> bytes:
    return pytest.importorskip("zstandard").ZstdCompressor().compress(b"".join(lines))


TWINS = {  # both forms of one chunk: (plain, sealed) from the chunk's lines, and the warning
    "plain cut short": (lambda x: x[:2], lambda x: _seal(x), "which holds every line of the other"),
    "plain with a line of its own": (
        lambda x: [*x[:2], x[-1].rstrip(b"\n") + b" \n"],  # the same record, another line
        lambda x: _seal(x),
        "the one holding more; 1 line(s) only the other holds are left out",
    ),
    "mid-seal": (lambda x: x, lambda x: _seal(x)[:-40], None),
    "sealed and not yet removed": (lambda x: x, lambda x: _seal(x), None),
}


@pytest.mark.parametrize("chunk", ["stream/00000.jsonl", "annotations/orch/00000.jsonl"])
@pytest.mark.parametrize("case", TWINS)
def test_a_chunk_in_both_forms_is_read_whole_and_a_disagreement_said(tmp_path, chunk, case):
    """A chunk in both forms: mid-seal (the sealed one cut short) or sealed but not yet removed,
    the plain one, quietly; where the forms disagree, the one holding more, said with the
    lines only the other holds. Either way every episode and annotation of the run is read."""
    run_dir = tmp_path / "run"
    shutil.copytree(PRIME / "stream", run_dir)
    traces = run_dir / "monitors" / "file" / "traces"
    plain = traces / chunk
    whole = _lines(plain.with_name(plain.name + ".zst") if chunk.startswith("stream") else plain)
    make_plain, make_sealed, said = TWINS[case]
    plain.write_bytes(b"".join(make_plain(whole)))
    plain.with_name(plain.name + ".zst").write_bytes(make_sealed(whole))
    proc = run("check", str(run_dir), "--from", "prime-rl", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["rows"] == 13 and result["max_abs_difference"] <= 1e-6
    twins = [w for w in result["warnings"] if "one chunk of prime-rl's trace stream" in w]
    if said is None:
        assert not twins
    else:
        assert len(twins) == 1 and f"read {plain}.zst, {said}" in twins[0]
    assert not any("index lists" in w for w in result["warnings"])


def test_episodes_the_index_lists_and_no_chunk_holds_are_counted(tmp_path):
    """An episode of a group read that its chunk lacks, and a chunk gone: left out, said with
    their count (the groups are still read from the index)."""
    run_dir = tmp_path / "run"
    shutil.copytree(PRIME / "stream", run_dir)
    stream = run_dir / "monitors" / "file" / "traces" / "stream"
    first = stream / "00000.jsonl.zst"
    first.write_bytes(_seal(_lines(first)[1:]))
    (stream / "00002.jsonl.zst").unlink()
    _, summary = _annotated(tmp_path, run_dir)
    assert (f"{first}: 1 episode(s) the index lists in this chunk are not in it (one: "
            "de624e008b5449899a6a9ce300dc4615): left out") in summary["warnings"]  # fmt: skip
    assert any(w.startswith("prime-rl's trace stream: left out 6 episode(s) the index lists in "
                            "chunk(s) 2, which") for w in summary["warnings"])  # fmt: skip


def _tree(depth: int) -> list[dict]:
    """A trace's nodes: a prompt at the root, then a binary tree of turns, each a token of
    context and a sampled token (its log-probability and advantage its node's number / 1000)."""
    nodes: list[dict[str, Any]] = [{"parent": None, "token_ids": [1, 2], "mask": [False, False]}]
    level = [0]
    for _ in range(depth):
        level, parents = [], level
        for p in parents:
            for _ in range(2):
                i = len(nodes)
                nodes.append({"parent": p, "token_ids": [1000 + i, 5000 + i], "mask": [0, 1],
                              "sampled": True, "logprobs": [-i / 1000],
                              "advantages": [i / 1000]})  # fmt: skip
                level.append(i)
    return nodes


def _root_paths(nodes: list[dict]) -> list[list[int]]:
    """Every root-to-leaf path, leaves in node order: the rollouts, walked one by one."""
    parents = {n["parent"] for n in nodes}
    out: list[list[int]] = []
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path: list[int] = []
        j: int | None = leaf
        while j is not None:
            path, j = [j, *path], nodes[j]["parent"]
        out.append(path)
    return out


def _episodes(nodes: list[dict], *, advantages: bool) -> list[dict]:
    """One group: an episode of one trace with the tree, and one of a single turn."""
    if not advantages:
        nodes = [{k: v for k, v in n.items() if k != "advantages"} for n in nodes]
    one = [nodes[0], {**nodes[1], "parent": 0}]
    turns = sum(1 for n in nodes if n.get("sampled"))
    return [
        {"id": f"e{e}", "group": {"id": "g"}, "ok": True, "run": {"work": {"step": 1}},
         "traces": [{"id": f"t{e}", "rewards": {"r": {"score": float(e), "weight": 1.0}},
                     "nodes": n, "info": {"turn_rewards": [float(i) for i in range(1, len(n))]
                                                          if e == 0 else [0.5] * 1},
                     "num_output_tokens": turns, "num_total_tokens": 2 * turns + 2}]}
        for e, n in enumerate((nodes, one))
    ]  # fmt: skip


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _updates(nodes: list[dict]) -> tuple[list[dict], dict[int, list[float]]]:
    """prime-rl's ship records for the tree's trace, one per branch in leaf order, values over
    every token of the branch's path; branch 1 gives null on its leaf's parent (which keeps
    what branch 0 gave it). And each node's sampled values after the fold, newest winning."""
    records: list[dict[str, Any]] = []
    folded: dict[int, list[float]] = {}
    for k, path in enumerate(_root_paths(nodes)):
        values: list[float | None] = []
        for i in path:
            for j, _ in enumerate(nodes[i]["token_ids"]):
                values.append(None if (k == 1 and i == path[-2]) else k + i / 1000 + j / 10)
        records.append({"trace_id": "t0", "info": {"effective": True, "ship": {"step": 2}},
                        "branches": [{"index": k, "advantages": values}]})  # fmt: skip
        start = 0
        for i in path:
            size = len(nodes[i]["token_ids"])
            given = zip(values[start : start + size], nodes[i]["mask"], strict=True)
            sampled = [v for v, m in given if m]
            known = [v for v in sampled if v is not None]
            if sampled and len(known) == len(sampled):
                folded[i] = known
            start += size
    records.append({"trace_id": "t1", "info": {"effective": True},
                    "branches": [{"index": 0, "advantages": [0.0, 0.0, 0.25, 0.5]}]})  # fmt: skip
    return records, folded


@pytest.mark.parametrize("layout", ["step files", "trace stream"])
def test_every_root_to_leaf_path_of_a_tree_is_a_rollout(tmp_path, layout):
    """A tree of 64 leaves read as 64 rollouts, each the tokens of its path end to end, with
    the path's log-probabilities, advantages (in the stream: the annotations folded, newest
    winning, a null keeping the node's) and turn rewards; the trace's costs on every row."""
    nodes = _tree(6)
    if layout == "step files":
        folded = {i: n["advantages"] for i, n in enumerate(nodes) if "advantages" in n}
        _write(tmp_path / "run/rollouts/step_1/train/effective/traces.jsonl",
               _episodes(nodes, advantages=True))  # fmt: skip
    else:
        traces = tmp_path / "run/monitors/file/traces"
        _write(traces / "stream/00000.jsonl", _episodes(nodes, advantages=False))
        updates, folded = _updates(nodes)
        _write(traces / "annotations/orch/00000.jsonl", updates)
    rows, _ = _annotated(tmp_path, tmp_path / "run")
    paths = _root_paths(nodes)
    tree_rows = [r for r in rows if r["episode"] == "e0"]
    assert [r["rollout_id"] for r in tree_rows] == [f"e0/0/{p[-1]}" for p in paths]
    for row, path in zip(tree_rows, paths, strict=True):
        assert row["input_ids"] == [t for i in path for t in nodes[i]["token_ids"]]
        assert row["action_mask"] == [int(m) for i in path for m in nodes[i]["mask"]]
        sampled = [i for i in path if nodes[i].get("sampled")]
        assert _sampled({**row, "source_advantages": row["logprobs"]}) == pytest.approx(
            [-i / 1000 for i in sampled])  # fmt: skip
        assert _sampled(row) == pytest.approx([a for i in sampled for a in folded[i]])
        assert row["turn_rewards"] == [float(i) for i in sampled]
        assert (row["num_turns"], row["num_output_tokens"]) == (len(nodes) - 1, len(nodes) - 1)
    assert len(tree_rows) == 64 and len(rows) == 65


def test_a_tree_whose_paths_visit_too_many_nodes_is_refused_before_they_are_built(
    tmp_path, monkeypatch
):
    """Nodes without tokens cost nothing in tokens, and a path still visits them: a spine of
    40 nodes with a leaf of one token on each is 40 paths of 900 nodes in all (and 40 tokens),
    past a limit of 500."""
    import advcli
    from advcli.errors import DataError
    from advcli.presets import prime_rl_traces

    nodes: list[dict[str, Any]] = [{"parent": None, "token_ids": [], "mask": []}]
    spine = 0
    for _ in range(40):
        nodes.append({"parent": spine, "token_ids": [], "mask": []})
        spine = len(nodes) - 1
        nodes.append({"parent": spine, "token_ids": [7], "mask": [True], "sampled": True})
    dump = _write(tmp_path / "step_1/train/effective/traces.jsonl",
                  _episodes(nodes, advantages=False)[:1])  # fmt: skip
    monkeypatch.setattr(prime_rl_traces, "EXPANDED_TOKENS", 500)
    with pytest.raises(DataError, match=r"trace 0's tree expands to 40 root-to-leaf paths of "
                       r"900 nodes in all .* beyond advcli's limit of 500"):  # fmt: skip
        advcli.audit([str(dump)], from_="prime-rl")


@pytest.mark.parametrize(
    ("layout", "value", "said"),
    [("step files", float("nan"), "NaN"), ("trace stream", float("nan"), "NaN"),
     ("trace stream", float("inf"), "infinity"), ("step files", float("-inf"), "-infinity")],
)  # fmt: skip
def test_a_logged_advantage_that_is_no_number_is_refused_where_it_is_read(
    tmp_path, layout, value, said
):
    """prime-rl trains on finite advantages: a NaN or an infinity where one is logged (a node's
    own, or an annotation's) is one line naming its file, line and trace, as the dump is read."""
    nodes = _tree(2)
    if layout == "step files":
        nodes[4]["advantages"] = [value]
        where = _write(tmp_path / "run/rollouts/step_1/train/effective/traces.jsonl",
                       _episodes(nodes, advantages=True))  # fmt: skip
        needle = f"{where}: line 1, column 'nodes': trace 0, node 4: a logged advantage is {said}"
    else:
        traces = tmp_path / "run/monitors/file/traces"
        _write(traces / "stream/00000.jsonl", _episodes(nodes, advantages=False))
        updates, _ = _updates(nodes)
        updates[2]["branches"][0]["advantages"][-1] = value
        where = _write(traces / "annotations/orch/00000.jsonl", updates)
        needle = (f"{where}: line 3, column 'branches': trace t0's annotation gives advantage "
                  f"{said} at token 5 of branch 2")  # fmt: skip
    proc = run("check", str(tmp_path / "run"), "--from", "prime-rl")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert needle in proc.stderr


def _prime_dump(tmp_path: Path, edit) -> str:
    """prime-rl's own effective traces (tests/fixtures/real) with the first trace's nodes
    edited."""
    lines = (
        (PRIME / "default" / "rollouts" / "step_1" / "train" / "effective" / "traces.jsonl")
        .read_text()
        .splitlines()
    )
    episode = json.loads(lines[0])
    edit(episode["traces"][0]["nodes"])
    folder = tmp_path / "rollouts" / "step_1" / "train" / "effective"
    folder.mkdir(parents=True)
    (folder / "traces.jsonl").write_text("\n".join([json.dumps(episode), *lines[1:]]) + "\n")
    return str(tmp_path / "rollouts")


def _set_parent(index: int, parent):
    def edit(nodes: list[dict]) -> None:
        nodes[index]["parent"] = parent

    return edit


def _cycle(nodes: list[dict]) -> None:
    nodes[1]["parent"], nodes[2]["parent"] = 2, 1


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_set_parent(2, 2), "trace 0, node 2: parent 2 is not another node"),
        (_set_parent(1, -1), "trace 0, node 1: parent -1 is not another node"),
        (_set_parent(1, 7), "trace 0, node 1: parent 7 is not another node"),
        (_set_parent(1, "0"), "trace 0, node 1: parent '0' is not another node"),
        (_cycle, "trace 0: node 1's parents form a cycle"),
        (lambda nodes: nodes.clear(), "trace 0 has no nodes"),
    ],
)
def test_prime_rl_node_graphs_are_checked(tmp_path, edit, needle):
    dump = _prime_dump(tmp_path, edit)
    for command in ("audit", "annotate"):
        extra = ["--method", "grpo", "--out", str(tmp_path / "o.parquet")] * (command != "audit")
        proc = run(command, dump, "--from", "prime-rl", *extra)
        assert proc.returncode == 1
        line = one_line(proc)
        assert "traces.jsonl: line 1, column 'traces': " + needle in line


def test_a_prime_rl_tree_past_the_expansion_limit_is_refused(tmp_path, monkeypatch):
    """Every root-to-leaf path is a rollout repeating its prefix: a deep tree of few tokens
    expands past any memory, so past EXPANDED_TOKENS it is refused before a path is built."""
    import advcli
    from advcli.errors import DataError
    from advcli.presets import prime_rl_traces

    def deep(nodes: list[dict]) -> None:
        leaf = nodes[-1]
        nodes[:] = nodes[:2]
        for i in range(2, 2 + 2**6 - 1):  # a binary tree under node 1
            nodes.append({**leaf, "parent": 1 if i < 4 else 2 + (i - 4) // 2})

    dump = _prime_dump(tmp_path, deep)
    assert advcli.audit([dump], from_="prime-rl").report.rollouts > 32  # within the limit
    monkeypatch.setattr(prime_rl_traces, "EXPANDED_TOKENS", 500)
    with pytest.raises(DataError, match=r"tree expands to 32 root-to-leaf paths of [\d,]+ tokens"):
        advcli.audit([dump], from_="prime-rl")


def test_a_failed_prime_rl_episode_without_tokens_is_skipped_and_said():
    all_file = (
        PRIME / "all_only" / "rollouts"
        / "step_1" / "train" / "all" / "traces.jsonl"
    )  # fmt: skip
    proc = run("audit", str(all_file), "--from", "prime-rl", "--json")
    assert proc.returncode == 0
    assert any("left out 1 failed episode(s) (ok false: no tokens, no reward)" in w
               for w in json.loads(proc.stdout)["warnings"])  # fmt: skip


def test_a_step_files_nodes_trainer_log_probs_are_the_trainers_stream(tmp_path):
    """An episode record whose sampled nodes hold ``trainer_logprobs`` (verifiers' node field)
    gives each path the trainer's stream on its sampled tokens; a path one of whose sampled
    nodes lacks them holds nulls there; a file without any has no such column."""
    nodes = _tree(2)  # nodes 1, 2 at depth 1; 3, 4 under 1; 5, 6 under 2
    for i in (1, 3, 4, 2, 5):
        nodes[i]["trainer_logprobs"] = [-i / 100]
    path = _write(tmp_path / "run/rollouts/step_1/train/effective/traces.jsonl",
                  _episodes(nodes, advantages=True))  # fmt: skip
    rows, _ = _annotated(tmp_path, path)
    by_leaf = {row["rollout_id"]: row for row in rows}
    # the path 0 → 1 → 3: tokens [1, 2 | 1001, 5001 | 1003, 5003], sampled at 3 and 5
    assert by_leaf["e0/0/3"]["trainer_logprobs"] == pytest.approx(
        [0, 0, 0, -0.01, 0, -0.03], abs=1e-7
    )
    assert by_leaf["e0/0/3"]["logprobs"] == pytest.approx([0, 0, 0, -0.001, 0, -0.003], abs=1e-7)
    assert by_leaf["e0/0/6"]["trainer_logprobs"] == [None] * 6  # node 6 has none
    for node in nodes:
        node.pop("trainer_logprobs", None)
    bare = _write(tmp_path / "bare/rollouts/step_1/train/effective/traces.jsonl",
                  _episodes(nodes, advantages=True))  # fmt: skip
    rows, _ = _annotated(tmp_path / "bare", bare)
    assert "trainer_logprobs" not in rows[0]
