"""check-parallel rules over a table of layouts, the attention limits, the memory estimate and recipes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envbuilder.errors import InvalidLayoutInputError, MatrixFileError, UnknownRecipeError
from envbuilder.parallel import GpuTarget, Layout, check_layout, estimate_memory, find_recipe, load_recipes
from envbuilder.parallel.attention import FLASH, FUSED, UNFUSED, disabled_backends, nearest_hidden_sizes
from envbuilder.parallel.rules import grad_accumulation

# A small dense model on one 8-GPU node that passes every rule; each case changes a few values.
BASE: dict[str, Any] = {
    "gpus_per_node": 8, "nodes": 1, "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
    "seq_length": 2048, "gbs": 64, "mbs": 1,
}
H100 = GpuTarget("H100", "9.0", 80.0)
V100 = GpuTarget("V100", "7.0", 32.0)
QWEN_TINY = {"num_layers": 28, "hidden_size": 128, "num_attention_heads": 28, "num_query_groups": 4,
             "seq_length": 4096, "gbs": 32, "mbs": 2, "cp": 2}
HPC_GUIDE = {"gpus_per_node": 4, "nodes": 2, "tp": 8, "num_layers": 12, "hidden_size": 768,
             "num_attention_heads": 16, "seq_length": 1024, "gbs": 192, "mbs": 32}

# id, overrides of BASE, GPU, failing rules, warning rules, text expected in the first failure (or "")
LAYOUTS: list[tuple[str, dict[str, Any], GpuTarget | None, set[str], set[str], str]] = [
    ("base", {}, None, set(), set(), ""),
    ("qwen-hidden128-28heads-cp2", QWEN_TINY, None, {"head_dim"}, set(), "every attention backend is disabled"),
    ("qwen-hidden3584-28heads-cp2", {**QWEN_TINY, "hidden_size": 3584}, None, set(), set(), ""),
    ("qwen-hidden128-cp1-unfused-only", {**QWEN_TINY, "cp": 1}, None, set(), {"head_dim"}, ""),
    ("pp2-one-layer", {"num_layers": 1, "pp": 2}, None, {"layers_pp"}, set(), "1 layer(s) are not divisible by PP 2"),
    ("pp2-vpp2-4-layers", {"num_layers": 4, "pp": 2, "vpp": 2, "gbs": 8}, None, set(), set(), ""),
    ("pp2-vpp2-odd-microbatches", {"num_layers": 4, "pp": 2, "vpp": 2, "gbs": 12}, None, {"vpp_microbatches"},
     set(), "3 micro-batch(es) per step is not a multiple of PP 2"),
    ("vpp-without-pp", {"vpp": 2}, None, {"layers_vpp"}, set(), "needs PP > 1"),
    ("pp2-vpp2-6-layers", {"num_layers": 6, "pp": 2, "vpp": 2, "gbs": 8}, None, {"layers_vpp"}, set(),
     "6 layers are not divisible by PP x VPP = 4"),
    ("hpc-guide-2x4-tp8", HPC_GUIDE, None, set(), {"tp_within_node"}, ""),
    ("hpc-guide-gbs200", {**HPC_GUIDE, "gbs": 200}, None, {"batch"}, {"tp_within_node"},
     "GBS 200 is not a multiple of MBS 32 x DP 1 = 32"),
    ("world-not-divisible", {"tp": 4, "pp": 3, "num_layers": 12}, None, {"world_size"}, set(),
     "8 GPUs (1 node(s) x 8) are not divisible by TP x PP x CP = 4 x 3 x 1 = 12"),
    ("heads-not-divisible-by-tp", {"num_attention_heads": 12, "hidden_size": 768, "tp": 8}, None,
     {"heads_tp", "query_groups_tp"}, set(), "12 attention heads are not divisible by TP 8"),
    ("query-groups-not-divisible-by-tp", {"num_query_groups": 2, "tp": 4}, None, {"query_groups_tp"}, set(),
     "2 query groups are not divisible by TP 4"),
    ("heads-not-divisible-by-groups", {"num_query_groups": 6}, None, {"query_groups_tp"}, set(),
     "16 heads are not divisible by 6 query groups"),
    # megatron-core >= 0.15 ModelParallelConfig.__post_init__ raises this exact text
    ("sp-with-tp1", {"sp": True}, None, {"sp_tp"}, set(), "Cannot use sequence parallelism without tensor parallelism"),
    ("sp-seq-not-divisible", {"sp": True, "tp": 4, "seq_length": 1022}, None, {"sp_seq"}, set(),
     "seq_length 1022 is not divisible by CP x TP = 4"),
    ("cp-seq-not-divisible", {"cp": 4, "seq_length": 4100}, None, {"cp_seq"}, set(),
     "seq_length 4100 is not divisible by 2 x CP = 8"),
    ("ep-without-experts", {"ep": 2}, None, {"experts_ep"}, set(), "EP 2 set but the model has no experts"),
    ("experts-not-divisible-by-ep", {"num_experts": 8, "ep": 3, "gpus_per_node": 6, "gbs": 60}, None,
     {"experts_ep"}, set(), "8 experts are not divisible by EP 3"),
    ("moe-ep8-ok", {"num_experts": 8, "ep": 8}, None, set(), set(), ""),
    ("moe-ep-tp-without-sp", {"num_experts": 8, "ep": 2, "tp": 2}, None, {"moe_sp"}, set(),
     "needs sequence parallelism"),
    ("expert-world", {"num_experts": 8, "ep": 8, "pp": 2}, None, {"expert_world"}, set(),
     "8 GPUs are not divisible by ETP x EP x PP = 1 x 8 x 2 = 16"),
    ("gbs-below-mbs-times-dp", {"gbs": 4}, None, {"batch"}, set(), "GBS 4 is not a multiple of MBS 1 x DP 8"),
    ("ffn-not-divisible-by-tp", {"ffn_hidden_size": 1001, "tp": 2}, None, {"ffn_tp"}, set(),
     "ffn_hidden_size 1001 is not divisible by TP 2"),
    ("head-dim-256-on-h100", {"hidden_size": 4096}, H100, set(), set(), ""),
    ("head-dim-256-unknown-gpu", {"hidden_size": 4096}, None, set(), {"head_dim"}, ""),
    ("head-dim-256-unknown-gpu-cp2", {"hidden_size": 4096, "cp": 2}, None, {"head_dim"}, set(),
     "every attention backend is disabled"),
    ("v100-cp2", {"cp": 2}, V100, {"head_dim"}, set(), "FlashAttention: needs sm80+"),
    ("head-dim-320-cp2", {"hidden_size": 5120, "cp": 2}, H100, {"head_dim"}, set(), "head_dim 320 > 256"),
    ("hidden-not-divisible-by-heads", {"hidden_size": 1030}, None, set(), {"head_dim"}, ""),
    ("llama3-8b-does-not-fit-24gib", {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                                      "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_linear_unit": True,
                                      "vocab_size": 128256, "share_embeddings": False},
     GpuTarget("L4", "8.9", 24.0), {"memory"}, set(), "does not fit"),
]


@pytest.mark.parametrize(("overrides", "gpu", "fails", "warns", "text"),
                         [case[1:] for case in LAYOUTS], ids=[case[0] for case in LAYOUTS])
def test_layout_table(overrides: dict[str, Any], gpu: GpuTarget | None, fails: set[str], warns: set[str],
                      text: str) -> None:
    report = check_layout(Layout(**{**BASE, **overrides}), gpu)
    assert {r.name for r in report.failures} == fails
    assert {r.name for r in report.rules if r.level == "warn"} == warns
    assert report.ok == (not fails)
    for r in report.failures:
        assert r.fix, f"{r.name} fails without a fix"
    if text:
        assert text in report.failures[0].message


def test_table_is_large_enough() -> None:
    assert len(LAYOUTS) >= 20


def test_qwen_tiny_names_backends_and_hidden_sizes() -> None:
    report = check_layout(Layout(**{**BASE, **QWEN_TINY}))
    [fail] = report.failures
    assert "head_dim 4.57" in fail.message
    for backend in (FLASH, FUSED, UNFUSED):
        assert backend in fail.message
    assert "does not support context parallelism (CP=2)" in fail.message
    assert fail.fix is not None
    assert "224 or 448" in fail.fix and "up to 3584" in fail.fix


def test_hpc_guide_example_verdict() -> None:
    lay = Layout(**HPC_GUIDE)
    report = check_layout(lay)
    assert report.ok
    assert lay.world_size == 8 and lay.dp == 1
    assert grad_accumulation(lay) == 6  # GBS 192 / (MBS 32 x DP 1)
    d = report.to_dict()
    assert d["derived"] == {"world_size": 8, "dp": 1, "grad_accumulation_steps": 6, "head_dim": 48,
                            "expert_tp": 8}


def test_world_size_fix_names_node_count() -> None:
    report = check_layout(Layout(**{**BASE, "tp": 4, "pp": 4, "cp": 2, "num_layers": 80}))
    assert report.failures[0].fix is not None
    assert report.failures[0].fix.startswith("use 4 nodes (32 GPUs)")


def test_batch_fix_offers_valid_gbs() -> None:
    report = check_layout(Layout(**{**HPC_GUIDE, "gbs": 200}))
    fix = report.failures[0].fix or ""
    assert "GBS 192 or 224" in fix
    for gbs in (192, 224):
        assert check_layout(Layout(**{**HPC_GUIDE, "gbs": gbs})).ok


# --- attention limits ---------------------------------------------------------------------------


@pytest.mark.parametrize(("head_dim", "sm", "cp", "disabled"), [
    (128, "9.0", 1, set()),
    (128, "9.0", 2, {UNFUSED}),
    (4, None, 2, {FLASH, FUSED, UNFUSED}),
    (4, None, 1, {FLASH, FUSED}),
    (192, "8.9", 1, {FUSED}),
    (256, "8.9", 1, {FLASH, FUSED}),  # > 192 needs sm80/90/100/120; 8.9 is not one
    (256, "9.0", 1, {FUSED}),
    (264, "9.0", 1, {FLASH, FUSED}),
    (64, "7.0", 1, {FLASH, FUSED}),
])
def test_disabled_backends(head_dim: int, sm: str | None, cp: int, disabled: set[str]) -> None:
    assert set(disabled_backends(head_dim, sm, cp)) == disabled


def test_nearest_hidden_sizes() -> None:
    assert nearest_hidden_sizes(128, 28, 1) == [224, 448]
    assert nearest_hidden_sizes(3500, 28, 1) == [3360, 3584]
    assert nearest_hidden_sizes(4000, 28, 1) == [3360, 3584]  # capped at head_dim 128
    assert all(h % 8 == 0 for h in nearest_hidden_sizes(1000, 12, 8))


# --- memory estimate ----------------------------------------------------------------------------


def test_parameter_counts_match_published_sizes() -> None:
    llama3_8b = Layout(**{**BASE, "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                          "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_linear_unit": True,
                          "vocab_size": 128256, "share_embeddings": False})
    assert estimate_memory(llama3_8b).params_total / 1e9 == pytest.approx(8.03, abs=0.01)
    mixtral = Layout(**{**BASE, "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                        "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_linear_unit": True,
                        "vocab_size": 32000, "share_embeddings": False, "num_experts": 8, "ep": 8})
    assert estimate_memory(mixtral).params_total / 1e9 == pytest.approx(46.7, abs=0.1)


def test_bytes_per_parameter_follow_megatron_table() -> None:
    # one layer without embeddings; DP 8: 18 bytes/param without, 6 + 12/8 with the distributed optimizer
    lay = Layout(**{**BASE, "num_layers": 1})
    est = estimate_memory(lay)
    p = est.params_per_gpu
    assert est.total_gib == pytest.approx(round(18 * p / 1024**3, 2))
    assert est.total_distributed_gib == pytest.approx(round((6 + 12 / 8) * p / 1024**3, 2))
    bf16 = estimate_memory(lay, grad_bytes=2)
    assert bf16.total_gib == pytest.approx(round(16 * p / 1024**3, 2))


def test_memory_warns_when_only_distributed_optimizer_fits() -> None:
    report = check_layout(Layout(**{**BASE, "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                                    "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_linear_unit": True,
                                    "vocab_size": 128256, "share_embeddings": False, "cp": 2}), H100)
    memory = next(r for r in report.rules if r.name == "memory")
    assert memory.level == "warn" and "only with the distributed optimizer" in memory.message
    assert report.ok


# --- input validation ---------------------------------------------------------------------------


def test_impossible_values_are_input_errors() -> None:
    with pytest.raises(InvalidLayoutInputError) as exc:
        check_layout(Layout(**{**BASE, "gpus_per_node": 0, "hidden_size": -5}))
    assert "--gpus-per-node 0" in exc.value.cause and "--hidden-size -5" in exc.value.cause


# --- recipes ------------------------------------------------------------------------------------

RECIPE_VERDICTS = {
    "llama3_8b": set(),
    "llama3_70b": {"world_size"},  # pretrain_recipe() defaults to 1 node for a 32-GPU layout
    "qwen25_7b": set(),
    "mixtral_8x7b": set(),
    "nemotron4_15b": set(),
    "nemotron4_340b": set(),
    "gpt3_175b": {"world_size"},  # same: 1 node by default, TP4 x PP8 needs 32 GPUs
}


@pytest.mark.parametrize("name", sorted(RECIPE_VERDICTS))
def test_builtin_recipe_default_layouts(name: str) -> None:
    recipe = find_recipe(name)
    report = check_layout(Layout(**recipe.layout_values()), H100)
    assert {r.name for r in report.failures} - {"memory"} == RECIPE_VERDICTS[name]
    for key in recipe.values:
        assert recipe.sources[key]  # every value cites its source


def test_recipes_cite_nemo_or_hf_and_cover_the_issue_list() -> None:
    recipes = load_recipes()
    assert {"llama3_8b", "llama3_70b", "qwen25_7b", "mixtral_8x7b", "nemotron4_15b", "gpt3_5b"} <= set(recipes)
    for r in recipes.values():
        assert r.source.startswith(("NVIDIA/NeMo:", "NVIDIA-NeMo/Megatron-Bridge:"))
        for src in r.sources.values():
            assert "@" in src or src.startswith("https://") or src == "dense model", src


def test_llama3_70b_runs_on_its_documented_four_nodes() -> None:
    values = {**find_recipe("llama3_70b").layout_values(), "nodes": 4}
    report = check_layout(Layout(**values), H100)
    assert report.ok
    assert grad_accumulation(report.layout) == 512  # GBS 512 / (MBS 1 x DP 1)


def test_unknown_recipe() -> None:
    with pytest.raises(UnknownRecipeError) as exc:
        find_recipe("llama9_1t")
    assert "llama3_8b" in exc.value.cause


def test_recipe_file_without_source_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "recipes.toml").write_text(
        'schema = 1\n[[recipe]]\nname = "x"\nrecipe = "here"\nnum_layers = { value = 2 }\n')
    with pytest.raises(MatrixFileError):
        load_recipes(tmp_path)
