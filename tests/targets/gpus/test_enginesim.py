"""Serving as an engine runs it (``pimbuild.targets.gpus.enginesim``): a model's bytes, the
KV blocks a device holds, step times by batch, vLLM's scheduler and ``pimbuild-serve``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.enginesim import cli, scheduler, shape
from pimbuild.targets.gpus.enginesim.steps import Steps
from pimbuild.targets.gpus.kerneltime import ops
from pimbuild.targets.gpus.systems import arrivals
from pimbuild.targets.gpus.systems.arrivals import Request

LLAMA31_8B = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256,
              "torch_dtype": "bfloat16"}
TINY = {**LLAMA31_8B, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000}


def config(tmp_path: Path, c: dict, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(c))
    return p


class Fixed:
    """Step times of a law the tests can add up: ``prefill_s`` per prefill token, ``step_s``
    per step."""

    def __init__(self, step_s: float = 0.01, prefill_s: float = 0.0) -> None:
        self.step_s, self.prefill_s, self.calls = step_s, prefill_s, []

    def seconds(self, chunks: list, decode_kv: list) -> float:
        self.calls.append((list(chunks), list(decode_kv)))
        return self.step_s + self.prefill_s * sum(c for c, _ in chunks)


def test_a_models_bytes_are_its_parameters(tmp_path: Path) -> None:
    m = shape.load(config(tmp_path, LLAMA31_8B))
    assert m.weight_bytes == pytest.approx(2 * 8.03e9, rel=0.01)  # Llama-3.1-8B: 8.03 B
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert m.head_dim == 128 and m.dtype == "bf16"
    # an fp16 model is timed as fp16 kernels (the bf16 tables do not answer for it)
    assert shape.load(config(tmp_path, {**TINY, "torch_dtype": "float16"}, "h.json")).dtype \
        == "fp16"
    # a mixture of experts: Mixtral-8x7B holds 46.7 B parameters, Qwen3-30B-A3B 30.5 B
    mixtral = shape.load(config(tmp_path, {**LLAMA31_8B, "vocab_size": 32000,
                                           "num_local_experts": 8, "num_experts_per_tok": 2},
                                "mixtral.json"))
    assert (mixtral.experts, mixtral.top_k, mixtral.ffn) == (8, 2, 14336)
    assert mixtral.weight_bytes == pytest.approx(2 * 46.7e9, rel=0.01)
    qwen = shape.load(config(tmp_path, {**LLAMA31_8B, "hidden_size": 2048, "head_dim": 128,
                                        "num_attention_heads": 32, "num_key_value_heads": 4,
                                        "num_hidden_layers": 48, "intermediate_size": 6144,
                                        "moe_intermediate_size": 768, "num_experts": 128,
                                        "num_experts_per_tok": 8, "vocab_size": 151936},
                             "qwen3moe.json"))
    assert qwen.weight_bytes == pytest.approx(2 * 30.5e9, rel=0.01)
    for bad, match in (({**TINY, "num_experts": 8}, "needs num_experts_per_tok"),
                       ({**TINY, "num_experts": 8, "num_experts_per_tok": 9}, "from 1 to 8"),
                       ({**TINY, "num_experts": 8, "num_experts_per_tok": 2,
                         "decoder_sparse_step": 2}, "alternate"),
                       ({**TINY, "num_experts": 8, "num_experts_per_tok": 2.5}, "whole number"),
                       ({k: v for k, v in TINY.items() if k != "vocab_size"},
                        "'vocab_size' is missing"),
                       ({**TINY, "num_hidden_layers": True}, "whole number"),
                       ({**TINY, "hidden_size": -4}, "must be >= 1"),
                       ({**TINY, "torch_dtype": "int3"}, "torch_dtype")):
        with pytest.raises(ConfigError, match=match):
            shape.load(config(tmp_path, bad, "bad.json"))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read model config"):
        shape.load(tmp_path / "broken.json")


def test_kv_blocks_are_what_memory_leaves(tmp_path: Path) -> None:
    m = shape.load(config(tmp_path, LLAMA31_8B))
    mem = shape.Memory(24 * 2**30, 0.9, reserve_bytes=1e9)
    blocks = mem.kv_blocks(m, 16, 2048, 256)
    free = 24 * 2**30 * 0.9 - m.weight_bytes - 1e9 - mem.activation_bytes(m, 2048, 256)
    assert blocks == int(free // (m.kv_bytes_per_token * 16))
    # more utilisation, more blocks; a model larger than the card: no block at all
    assert shape.Memory(24 * 2**30, 0.95).kv_blocks(m, 16, 2048, 256) > blocks
    with pytest.raises(ConfigError, match="does not fit"):
        shape.Memory(16 * 2**30, 0.9).kv_blocks(m, 16, 2048, 256)


def test_step_times_follow_the_batch(tmp_path: Path) -> None:
    m = shape.load(config(tmp_path, TINY))
    seen: list[ops.Op] = []

    def seconds(o: ops.Op) -> float:
        seen.append(o)
        flops, moved = o.work()
        return 1e-6 + flops / 1e14 + moved / 1e12

    steps = Steps(m, seconds)
    one = steps.seconds([], [100])
    assert steps.seconds([], [100] * 64) > one  # more sequences decoding
    assert steps.seconds([], [4000]) > one  # a longer KV cache
    assert steps.seconds([(512, 0)], []) > steps.seconds([(16, 0)], [])
    # the engine kernels of a layer, timed at the step's tokens
    names = {o.op for o in seen}
    assert names == {"add_rmsnorm", "linear", "rope", "silu_mul", "prefill_attention",
                     "decode_attention"}
    qkv = [o for o in seen if o.op == "linear" and o.k == (4 + 2 * 2) * 64]
    assert qkv and qkv[0].n == 256
    calls = len(seen)
    steps.seconds([], [100])  # memoised
    assert len(seen) == calls
    # decode lengths within one KV block share a step time
    assert steps.seconds([], [97]) == one


def test_one_request_prefills_then_decodes() -> None:
    fixed = Fixed(step_s=0.01)
    run = scheduler.simulate([Request(1.0, 100, 5)], fixed,
                             scheduler.Limits(kv_blocks=100))
    s = run.seqs[0]
    assert s.first_s == pytest.approx(1.01) and s.finish_s == pytest.approx(1.05)
    assert run.steps == 5 and fixed.calls[0] == ([(100, 0)], [])
    # each decode reads the cache of every position before it, the new one included
    assert [c[1] for c in fixed.calls[1:]] == [[101], [102], [103], [104]]


def test_a_long_prompt_is_chunked_and_decodes_go_first() -> None:
    fixed = Fixed()
    lim = scheduler.Limits(max_batched_tokens=2048, kv_blocks=1000)
    run = scheduler.simulate([Request(0.0, 10, 50), Request(0.0, 5000, 2)], fixed, lim)
    chunks = [c for c, _ in fixed.calls if c]
    assert chunks[0] == [(10, 0), (2038, 0)]  # the budget shared, FCFS
    # the first request decodes one token beside each later chunk
    assert chunks[1] == [(2047, 2038)] and chunks[2] == [(915, 4085)]
    assert fixed.calls[1][1] == [11]
    assert run.seqs[1].first_s == pytest.approx(0.03)


def test_the_batch_is_bounded_by_seqs_and_blocks() -> None:
    reqs = [Request(0.0, 64, 40) for _ in range(12)]
    run = scheduler.simulate(reqs, Fixed(), scheduler.Limits(max_seqs=4, kv_blocks=1000))
    assert max(run.batch) == 4 and run.preemptions == 0
    tight = scheduler.simulate(reqs, Fixed(), scheduler.Limits(block_size=16, kv_blocks=20))
    # 12 x (64 + 40) positions do not fit in 320: requests are preempted and recomputed
    assert tight.preemptions > 0 and tight.peak_blocks <= 20
    assert all(s.finish_s > 0 and s.generated == 40 for s in tight.seqs)
    with pytest.raises(ConfigError, match="needs more than the 5 KV blocks"):
        scheduler.simulate(reqs, Fixed(), scheduler.Limits(block_size=16, kv_blocks=5))
    with pytest.raises(ConfigError, match="at least one token"):
        scheduler.simulate([Request(0.0, 0, 3)], Fixed(), scheduler.Limits(kv_blocks=5))


def test_traces_in_jsonl(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"input_toks": 20, "output_toks": 3, "arrival_time_ns": 2000000000}\n\n'
                 '{"arrival_s": 0.5, "input_tokens": 7, "output_tokens": 2}\n')
    assert arrivals.trace(p) == [Request(0.5, 7, 2), Request(2.0, 20, 3)]
    for text, match in (('{"input_toks": -1, "output_toks": 3, "arrival_time_ns": 0}', ":1: "),
                        ('{"input_toks": 4, "arrival_time_ns": 0}', "needs the keys"),
                        ('{"input_toks": 4.5, "output_toks": 3, "arrival_time_ns": 0}',
                         "must be a whole number"),
                        ("[1, 2]", "needs the keys"), ("{", "not JSON"), ("", "no requests")):
        p.write_text(text)
        with pytest.raises(ConfigError, match=match):
            arrivals.trace(p)


def test_serve_command(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.01, "input_tokens": 300 + i,
                                         "output_tokens": 20}) + "\n" for i in range(40)))
    measured = tmp_path / "m.jsonl"
    measured.write_text("".join(json.dumps({"input_toks": 300, "output_toks": 20,
                                            "queued_ts": 1.0, "first_token_ts": 1.1,
                                            "last_token_ts": 1.1 + 19 * 0.01}) + "\n"
                                for _ in range(3)))
    out = tmp_path / "serve.json"
    model = config(tmp_path, TINY)
    base = ["--trace", str(trace), "--model-config", str(model), "--device", "rtx4090"]
    assert cli.main([*base, "--measured", str(measured), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| TPOT mean |" in text and "rtx4090 (RTX-4090): 40 requests" in text
    data = json.loads(out.read_text())
    assert data["measured"]["tpot"]["mean"] == pytest.approx(10.0)
    assert data["simulated"]["ttft"]["p99"] >= data["simulated"]["ttft"]["p50"] > 0
    dev = data["devices"]["rtx4090"]
    assert dev["kv_blocks"] == dev["kv_blocks_modelled"] > 0 and dev["requests"] == 40
    for extra, match in ((["--max-num-seqs", "0"], "--max-num-seqs must be >= 1"),
                         (["--gpu-memory-utilization", "1.5"], "utilization"),
                         (["--kv-blocks", "-2"], "--kv-blocks must be >= 1"),
                         (["--measured", str(model)], "not a vLLM request record"),
                         (["--device", "rtx3090"], "unknown device 'rtx3090'")):
        assert cli.main([*base, *extra, "--json", str(tmp_path / "no.json")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and match in err and err.count("\n") == 1
        assert not (tmp_path / "no.json").exists()
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "nomem.yaml").write_text(
        "name: No-Memory\nfp32_tflops: 82.6\nbf16_tflops: 165.2\nmem_gbps: 1008\n"
        "l2_mb: 72\nlaunch_us: 2\nprice_per_hour: 0.7\nsms: 128\nboost_mhz: 2520\n"
        "tdp_w: 450\n")
    assert cli.main([*base[:-1], "nomem", "--config-dir", str(tmp_path)]) == 1
    assert "nomem.yaml: 'memory_gb' is missing" in capsys.readouterr().err
    big = config(tmp_path, {**LLAMA31_8B, "hidden_size": 8192, "num_attention_heads": 64,
                            "num_hidden_layers": 80, "intermediate_size": 28672}, "70b.json")
    big_run = ["--trace", str(trace), "--model-config", str(big), "--device", "rtx4090"]
    assert cli.main(big_run) == 1  # 140 GB of weights on a 24 GB card
    assert "does not fit" in capsys.readouterr().err
    # vLLM's own block count (a sharded or offloaded run) is served with as given
    assert cli.main([*big_run, "--kv-blocks", "100"]) == 0
    assert "KV blocks 100 (the memory model gives 0)" in capsys.readouterr().out
    for extra, match in ((["--device", "a100,l40s", "--kv-blocks", "9"], "one --device"),
                         (["--device", "a100,a100"], "name each GPU once"),
                         (["--device", "a100,l40s", "--router", "random"], "unknown router"),
                         (["--device", "a100", "--pd"], "--pd takes two devices"),
                         (["--device", "a100,l40s", "--pd", "--link", "cb"], "unknown link")):
        assert cli.main([*base[:-2], *extra]) == 1
        assert match in capsys.readouterr().err


def test_serve_command_runs_pd(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,300,20\n0.01,500,10\n")
    out = tmp_path / "pd.json"
    assert cli.main(["--trace", str(trace), "--model-config", str(config(tmp_path, TINY)),
                     "--device", "a100,l40s", "--pd", "--json", str(out)]) == 0
    assert "PD: a100 prefills, l40s decodes over rdma200" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["system"] == "pd" and data["devices"]["l40s"]["requests"] == 2


def engine(step_s: float, kv_blocks: int = 1000, name: str = "") -> scheduler.Engine:
    return scheduler.Engine(Fixed(step_s), scheduler.Limits(kv_blocks=kv_blocks), name)


def test_routers_send_work_where_it_is_served() -> None:
    from pimbuild.targets.gpus.enginesim import replicas

    reqs = [Request(0.01 * i, 64, 30) for i in range(60)]
    runs = replicas.distribute(reqs, [engine(0.01), engine(0.01)], "round_robin")
    assert [len(r.seqs) for r in runs] == [30, 30]
    # a GPU three times slower: a router that sees the queues sends it less
    for router in ("jsq", "lot"):
        fast, slow = replicas.distribute(reqs, [engine(0.01), engine(0.03)], router)
        assert len(fast.seqs) > len(slow.seqs) > 0, router
    # four sequences at most in a batch: a second replica doubles what is served
    four = scheduler.Limits(max_seqs=4, kv_blocks=1000)
    alone = replicas.throughput([scheduler.simulate(reqs, Fixed(0.01), four)])
    both = replicas.throughput(replicas.distribute(
        reqs, [scheduler.Engine(Fixed(0.01), four), scheduler.Engine(Fixed(0.01), four)],
        "jsq"))
    assert both == pytest.approx(2 * alone, rel=0.1)
    # a request that fits only in the larger cache goes there, whatever the router says
    big = [Request(0.0, 64, 30), Request(0.0, 1000, 10)]
    small, large = replicas.distribute(big, [engine(0.01, 10), engine(0.01, 100)],
                                       "round_robin")
    assert [s.req.input_tokens for s in large.seqs] == [1000]
    with pytest.raises(ConfigError, match="fits in no engine"):
        replicas.distribute([Request(0.0, 5000, 10)], [engine(0.01, 10)], "jsq")


def test_pd_hands_each_cache_over_the_link() -> None:
    from pimbuild.targets.gpus.costmodel.cost import Link
    from pimbuild.targets.gpus.enginesim import disagg

    link = Link(gbps=8.0, latency_us=0.0)  # a byte a nanosecond
    pre = scheduler.Engine(Fixed(0.01), scheduler.Limits(kv_blocks=7), "p", "prefill")
    dec = scheduler.Engine(Fixed(0.02), scheduler.Limits(kv_blocks=100), "d", "decode")
    [s] = disagg.serve([Request(0.0, 100, 4)], pre, dec, link, kv_bytes_per_token=10**5)
    # the prompt (7 blocks of 16 hold it) is prefilled in one step, its 10 MB cross in 10 ms,
    # then three decode steps on the other GPU
    assert s.first_s == pytest.approx(0.01)
    assert s.finish_s == pytest.approx(0.01 + 0.01 + 3 * 0.02)
    assert pre.free == 7 and dec.run.steps == 3 and pre.run.steps == 1
    # transfers queue on the link: two prompts prefilled together arrive one after the other
    pre = scheduler.Engine(Fixed(0.01), scheduler.Limits(kv_blocks=100), "p", "prefill")
    dec = scheduler.Engine(Fixed(0.02), scheduler.Limits(kv_blocks=100), "d", "decode")
    a, b = disagg.serve([Request(0.0, 100, 2), Request(0.0, 100, 2)], pre, dec, link, 10**5)
    assert (a.finish_s, b.finish_s) == (pytest.approx(0.04), pytest.approx(0.06))
    # a one-token answer never leaves the prefill GPU
    pre = scheduler.Engine(Fixed(0.01), scheduler.Limits(kv_blocks=100), "p", "prefill")
    [one] = disagg.serve([Request(0.0, 100, 1)], pre, dec, link, 10**5)
    assert one.finish_s == pytest.approx(0.01) and pre.handoffs == []
    small = scheduler.Engine(Fixed(0.02), scheduler.Limits(kv_blocks=2), "d", "decode")
    with pytest.raises(ConfigError, match="does not fit in the decode engine"):
        disagg.serve([Request(0.0, 100, 4)], pre, small, link, 10**5)


BIG = {**LLAMA31_8B, "hidden_size": 8192, "num_attention_heads": 64, "num_hidden_layers": 40,
       "intermediate_size": 28672}  # 73 GB of weights: an 80 GB A100 holds it, an L40S not


def test_a_split_model_holds_each_stage_s_share(tmp_path: Path) -> None:
    from pimbuild.targets.gpus.enginesim import pipeline

    m = shape.load(config(tmp_path, BIG))
    a, b = m.stages(10)
    assert (a.layers, b.layers, a.head, b.embed) == (10, 30, False, False)
    assert a.weight_bytes + b.weight_bytes == m.weight_bytes
    assert a.kv_bytes_per_token + b.kv_bytes_per_token == m.kv_bytes_per_token
    with pytest.raises(ConfigError, match="1 to 39"):
        m.stages(40)

    def clock(o: ops.Op) -> float:
        flops, moved = o.work()
        return 2e-6 + max(flops / 3e14, moved / 2e12)

    from pimbuild.targets.gpus.costmodel.cost import Link
    big, small = shape.Memory(80 * 2**30), shape.Memory(48 * 2**30)
    first, pipe, blocks = pipeline.split(m, [clock, clock], [big, small], Link(200, 5), 16,
                                         2048, 256)
    # the smaller GPU can hold only part of the layers: more go to the larger
    assert first > m.layers // 2 and blocks > 0
    assert small.kv_blocks(m.stages(first)[1], 16, 2048, 256) >= blocks
    t = pipe.seconds([], [1024] * 8)
    assert t > sum(s.seconds([], [1024] * 8) for s in pipe.stages)  # plus the hop
    tiny = shape.Memory(24 * 2**30)  # two 24 GB cards hold less than the weights
    with pytest.raises(ConfigError, match="split at no layer"):
        pipeline.split(m, [clock, clock], [tiny, tiny], Link(200, 5), 16, 2048, 256)


def test_what_no_gpu_holds_alone_is_served_split(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,300,20\n0.01,500,10\n")
    base = ["--trace", str(trace), "--model-config", str(config(tmp_path, BIG))]
    for extra, system in (([], "request distribution"), (["--pd"], "PD")):
        assert cli.main([*base, "--device", "a100,l40s", *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {system} is infeasible: on l40s, ") and \
            "does not fit" in err
    assert cli.main([*base, "--device", "a100,l40s", "--pp"]) == 0
    out = capsys.readouterr().out
    assert "layers split over a100+l40s" in out and "2 requests" in out
    assert cli.main([*base, "--device", "a100,l40s", "--pp", "--pd"]) == 1
    assert "different systems" in capsys.readouterr().err


def test_synthetic_requests_follow_their_laws(tmp_path: Path, capsys) -> None:
    reqs = arrivals.lognormal(4.0, 4000, 512, 128, 0.8, seed=1)
    assert reqs == arrivals.lognormal(4.0, 4000, 512, 128, 0.8, seed=1)  # seeded
    mean = sum(r.input_tokens for r in reqs) / len(reqs)
    assert mean == pytest.approx(512, rel=0.05)
    assert sum(r.output_tokens for r in reqs) / len(reqs) == pytest.approx(128, rel=0.05)
    assert reqs[-1].arrival_s == pytest.approx(1000, rel=0.1)  # 4,000 at 4 a second
    assert len({r.input_tokens for r in reqs}) > 100 and min(r.output_tokens for r in reqs) >= 1
    assert {r.input_tokens for r in arrivals.lognormal(1.0, 50, 300, 20, 0.0)} == {300}
    for bad in ((0.0, 5, 1, 1, 0.5), (1.0, 0, 1, 1, 0.5), (1.0, 5, float("nan"), 1, 0.5),
                (1.0, 5, 1, 1, 4.0)):
        with pytest.raises(ConfigError, match="synthetic trace"):
            arrivals.lognormal(*bad)
    model = config(tmp_path, TINY)
    base = ["--model-config", str(model), "--device", "l40s"]
    assert cli.main([*base, "--synthetic", "50,20,300,20"]) == 0
    assert "50 requests" in capsys.readouterr().out
    for extra, match in ((["--synthetic", "50,x,300,20"], "N,RATE,PROMPT,OUTPUT"),
                         (["--synthetic", "50,1,300"], "N,RATE,PROMPT,OUTPUT"),
                         (["--synthetic", "1,1,1,1,1,1"], "at most five"),
                         ([], "--trace FILE or --synthetic"),
                         (["--synthetic", "5,1,300,20", "--trace", str(model)], "--trace FILE")):
        assert cli.main([*base, *extra]) == 1
        assert match in capsys.readouterr().err


def test_prefetched_kernel_times_are_the_same_and_counted_when_used(tmp_path: Path) -> None:
    from pimbuild.targets.gpus.kerneltime import clock

    m = shape.load(config(tmp_path, LLAMA31_8B))
    batches = [([], [100] * 7), ([(300, 0)], [2000] * 3), ([(77, 512)], []), ([], [5000])]
    one, _ = clock.clock("l40s")
    many, _ = clock.clock("l40s")
    alone = [Steps(m, one.seconds).seconds(*b) for b in batches]
    steps = Steps(m, many.seconds, prefetch=many.prefetch)
    assert [steps.seconds(*b) for b in batches] == alone
    # the window's other token counts were timed, but only the ops used are counted
    assert len(many.ready) > 0
    assert sum(many.how.values()) == len(many.cache) == len(one.cache)
    assert many.how == one.how
