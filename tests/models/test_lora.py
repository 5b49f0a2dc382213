"""LoRA / QLoRA policies (rlvr.models.lora): adapters on every path into the model, the free
reference, quantised storage, merging, PEFT and Hugging Face export, memory accounting."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer, from_pretrained
from rlvr.models import lora as L
from rlvr.models.scoring import token_logprobs
from rlvr.rollout.sampler import SamplingParams, sample
from tests.models.helpers import build_hf_checkpoint, tiny_config, torch_logits

TOKENS = np.array([[1, 5, 9, 3, 7, 2, 11, 4], [1, 8, 8, 2, 6, 40, 13, 0]], np.int32)


def _model(**kw):
    return Transformer(tiny_config(**kw), rngs=nnx.Rngs(0))


def _perturb(policy, scale=0.1, seed=3):
    """The policy's params with every adapter moved away from its initial value (B != 0)."""
    _, params, _ = nnx.split(policy.model, nnx.Param, ...)
    adapters, base = nnx.split_state(params, nnx.LoRAParam, ...)
    leaves, tree = jax.tree.flatten(adapters)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    moved = [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return nnx.merge_state(jax.tree.unflatten(tree, moved), base)


def test_config_rejects_bad_values():
    for kw, field in ((dict(rank=0), "rank"), (dict(alpha=0.0), "alpha"), (dict(dropout=1.0), "dropout"),
                      (dict(targets=("q_proj", "lm_head")), "targets"),
                      (dict(quantize="int4"), "quantize"), (dict(train_norms=1), "train_norms")):
        with pytest.raises(ValueError, match=f"LoRAConfig.{field}"):
            L.LoRAConfig(**kw)


def test_adapters_start_at_the_base_and_the_reference_is_the_base_exactly():
    model = _model()
    base = np.asarray(model(TOKENS))
    policy = L.apply_lora(model, L.LoRAConfig(rank=4, alpha=8.0))
    np.testing.assert_array_equal(np.asarray(model(TOKENS)), base)  # B = 0 at init
    params = _perturb(policy)
    adapted = policy.model_of(params)
    assert np.abs(np.asarray(adapted(TOKENS)) - base).max() > 1e-3
    ref = policy.model_of(policy.reference_params(params))
    np.testing.assert_array_equal(np.asarray(ref(TOKENS)), base)


def test_train_norms_scale_the_logits_and_the_reference_keeps_the_base_norms():
    """With train_norms every RMSNorm gets a zero-initialised trainable offset: the policy starts
    at its base, the final norm's offset scales the logits (what projection adapters cannot do:
    the final norm divides their effect on the residual's size out), and π_ref (adapters off)
    uses the base norms exactly. Merging folds the offsets into the norm weights."""
    model = _model()
    base = np.asarray(model(TOKENS))
    policy = L.apply_lora(model, L.LoRAConfig(rank=2, train_norms=True))
    np.testing.assert_array_equal(np.asarray(model(TOKENS)), base)
    _, params, _ = nnx.split(model, nnx.Param, ...)
    trained, _ = nnx.split_state(params, policy.trainable, ...)
    deltas = [p for p, _ in nnx.to_flat_state(trained) if p[-1] == "scale_delta"]
    assert len(deltas) == 2 * model.config.num_layers + 1
    # the final norm's offset = its scale: every logit doubles (the LM head is linear)
    model.model.norm.scale_delta.set_value(model.model.norm.scale[...].astype(jnp.float32))
    np.testing.assert_allclose(np.asarray(model(TOKENS)), 2 * base, rtol=1e-5, atol=1e-5)
    _, params, _ = nnx.split(model, nnx.Param, ...)
    ref = policy.model_of(policy.reference_params(params))
    np.testing.assert_array_equal(np.asarray(ref(TOKENS)), base)
    merged = L.merge(model)
    assert merged.model.norm.scale_delta is None
    np.testing.assert_allclose(np.asarray(merged(TOKENS)), 2 * base, rtol=1e-5, atol=1e-5)


def test_trainable_filter_selects_only_the_adapters():
    model = _model()
    policy = L.apply_lora(model, L.LoRAConfig(rank=2, targets=("q_proj", "v_proj", "down_proj")))
    _, params, _ = nnx.split(model, nnx.Param, ...)
    adapters, _ = nnx.split_state(params, policy.trainable, ...)
    paths = sorted("/".join(map(str, p)) for p, _ in nnx.to_flat_state(adapters))
    cfg = model.config
    assert len(paths) == cfg.num_layers * 3 * 2
    assert all(p.endswith(("/lora/lora_a", "/lora/lora_b")) and "lora/lora/" not in p for p in paths)
    assert {p.split("/")[4] for p in paths} == {"q_proj", "v_proj", "down_proj"}
    counts = L.param_counts(params)
    d, f, r = cfg.hidden_size, cfg.intermediate_size, 2
    q, v = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = r * (d + q) + r * (d + v) + r * (f + d)
    assert counts["trainable"] == cfg.num_layers * per_layer
    assert counts["total"] == cfg.num_params() + counts["trainable"]


@pytest.mark.parametrize("quantize", ["none", "int8", "nf4"])
def test_scoring_sampling_and_merge_see_the_adapters(quantize):
    """The learner's scoring (hidden_states), the sampler's KV-cache path (forward_cached) and
    the merged plain model all compute the adapted policy."""
    model = _model(hidden_size=64, intermediate_size=128, num_heads=4, head_dim=16)
    policy = L.apply_lora(model, L.LoRAConfig(rank=4, alpha=8.0, quantize=quantize))
    adapted = policy.model_of(_perturb(policy))
    logits = np.asarray(adapted(TOKENS))
    merged = L.merge(adapted)
    assert not L.has_adapters(merged) and L.has_adapters(adapted)
    np.testing.assert_allclose(np.asarray(merged(TOKENS)), logits, atol=2e-5)
    lp, _ = token_logprobs(adapted, TOKENS)
    lp_merged, _ = token_logprobs(merged, TOKENS)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(lp_merged), atol=2e-5)
    sp = SamplingParams(temperature=1.0, max_new_tokens=5, stop_token_ids=(2,))
    prompt, mask = TOKENS[:, :4], np.ones((2, 4), bool)
    out = sample(adapted, prompt, mask, jax.random.PRNGKey(0), sp, pad_id=0)
    out_merged = sample(merged, prompt, mask, jax.random.PRNGKey(0), sp, pad_id=0)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(out_merged.tokens))
    # behaviour log-probs from the KV-cache path = the learner's scores of the same tokens
    rescored, _ = token_logprobs(adapted, out.tokens, positions=out.positions,
                                 attention_mask=out.attention_mask)
    m = np.asarray(out.loss_mask) > 0
    np.testing.assert_allclose(np.asarray(rescored)[m], np.asarray(out.behavior_logprobs)[m],
                               atol=2e-5)


@pytest.mark.parametrize("qtype,rel", [("int8", 1 / 127), ("nf4", 0.2)])
def test_quantized_kernel_storage_and_error(qtype, rel):
    w = jax.random.normal(jax.random.PRNGKey(0), (128, 48)) * 0.05
    q = L.QuantizedKernel(w, qtype=qtype, axes=("embed", "mlp"))
    deq = np.asarray(q[...])
    assert deq.shape == (128, 48) and deq.dtype == np.float32
    err = np.abs(deq - np.asarray(w))
    if qtype == "int8":
        assert q.codes.get_value().dtype == jnp.int8 and q.codes.shape == (128, 48)
        assert q.scale.shape == (1, 48)
        # round to nearest: at most half a step of each column's absmax / 127
        assert np.all(err <= np.abs(np.asarray(w)).max(0) / 127 * 0.5 + 1e-7)
    else:
        assert q.codes.get_value().dtype == jnp.uint8 and q.codes.shape == (64, 48)  # 2 per byte
        assert q.scale.shape == (128 // L.NF4_BLOCK, 48)
        assert err.max() <= rel * np.abs(np.asarray(w)).max()
        # 16 code values per block, zero exactly representable
        assert len(np.unique(deq[:64, 0] / np.asarray(q.scale[...])[0, 0])) <= 16
    # int8: one byte per weight + a float32 scale per output; nf4: half a byte + one per block
    n_scales = 48 if qtype == "int8" else 2 * 48
    assert L.tree_bytes(nnx.state(q)) == w.size * (1 if qtype == "int8" else 0.5) + 4 * n_scales


def test_quantized_base_has_no_float_copy_of_the_projections():
    model = _model(hidden_size=64, intermediate_size=128, num_heads=4, head_dim=16)
    L.apply_lora(model, L.LoRAConfig(rank=2, quantize="nf4"))
    flat = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    kernels = [p for p in flat if "layers" in p and p[-1] == "kernel"]
    assert not kernels  # every block projection kernel is codes + scale now
    codes = [v for p, v in flat.items() if p[-1] == "codes"]
    assert len(codes) == model.config.num_layers * 7
    assert all(v.get_value().dtype == jnp.uint8 for v in codes)


def test_attach_after_a_warm_start_keeps_the_initial_adapters():
    model = _model()
    policy = L.apply_lora(model, L.LoRAConfig(rank=2, quantize="int8"))
    _, params, _ = nnx.split(model, nnx.Param, ...)
    plain = policy.merged_params(params)
    warm = jax.tree.map(lambda x: x * 1.01, plain)  # a warm start moved the base
    again = policy.attach(warm)
    assert jax.tree.structure(again) == jax.tree.structure(params)
    a0, _ = nnx.split_state(params, nnx.LoRAParam, ...)
    a1, b1 = nnx.split_state(again, nnx.LoRAParam, ...)
    for x, y in zip(jax.tree.leaves(a0), jax.tree.leaves(a1)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    ref = nnx.merge(policy.base_graphdef, warm, policy.base_rest)(TOKENS)
    np.testing.assert_allclose(np.asarray(policy.model_of(again)(TOKENS)), np.asarray(ref),
                               atol=0.05)  # int8 base: close to the warm-started model


def test_dropout_only_in_train_mode():
    model = _model()
    policy = L.apply_lora(model, L.LoRAConfig(rank=4, dropout=0.5))
    params = _perturb(policy, scale=0.5)
    eval_a = np.asarray(policy.model_of(params)(TOKENS))
    np.testing.assert_array_equal(np.asarray(policy.model_of(params)(TOKENS)), eval_a)
    outs = []
    for k in (0, 1):
        m = policy.model_of(params)
        policy.train_mode(m, jax.random.PRNGKey(k))
        outs.append(np.asarray(m(TOKENS)))
    assert np.abs(outs[0] - eval_a).max() > 1e-4 and np.abs(outs[0] - outs[1]).max() > 1e-4
    assert L.LoRAPolicy.train_mode.fget(L.apply_lora(_model(), L.LoRAConfig(rank=4))) is None


@pytest.mark.slow
def test_memory_train_state_qwen_0_5b_shape():
    """TrainState bytes of a Qwen2.5-0.5B-shaped policy (abstract, jax.eval_shape): full
    fine-tuning + KL holds params, Adam's two moments and a reference copy (4 × params); LoRA +
    KL holds the bf16 base and the adapters with their moments, no reference copy."""
    import optax

    from rlvr.models import ModelConfig
    from rlvr.records.state import create_train_state

    cfg = ModelConfig(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                      num_heads=14, num_kv_heads=2, head_dim=64, tie_word_embeddings=True,
                      attention_bias=True, architecture="qwen2")
    opt = optax.adamw(1e-5)

    def state_of(lora_cfg, param_dtype):
        def build():
            m = Transformer(cfg.replace(param_dtype=param_dtype), rngs=nnx.Rngs(0))
            pol = L.apply_lora(m, lora_cfg) if lora_cfg else None
            _, p, _ = nnx.split(m, nnx.Param, ...)
            return create_train_state(p, opt, seed=0, ref_params=None if pol else p,
                                      trainable=pol.trainable if pol else None)

        return jax.eval_shape(build)

    full = state_of(None, "float32")
    lora = state_of(L.LoRAConfig(rank=16), "bfloat16")
    qlora = state_of(L.LoRAConfig(rank=16, quantize="nf4"), "bfloat16")
    n = cfg.num_params()
    assert L.tree_bytes(full.params) == 4 * n
    assert abs(L.tree_bytes(full) - 16 * n) < 64  # params + mu + nu + ref (+ step counters)
    adapters = L.param_counts(lora.params)["trainable"]
    assert adapters == 24 * 16 * (896 + 896 + 896 + 128 + 896 + 128 + 896 + 896 + 3 * (896 + 4864))
    assert L.tree_bytes(lora.ref_params) == 0 and L.tree_bytes(lora.opt_state) < 2 * 4 * adapters + 64
    assert abs(L.tree_bytes(lora) - (2 * n + 3 * 4 * adapters)) < 64
    assert L.tree_bytes(lora) < L.tree_bytes(full) / 7
    assert L.tree_bytes(qlora) < L.tree_bytes(lora) * 0.55


@pytest.mark.parametrize("arch,train_norms", [("qwen2", False), ("llama", False), ("qwen2", True)])
def test_export_merged_and_peft_adapters_load_in_transformers(tmp_path, arch, train_norms):
    """Merged weights through save_pretrained load in transformers; the adapters alone in the
    PEFT layout (trained norms as modules_to_save) load with peft onto the base checkpoint;
    both give our logits."""
    pytest.importorskip("peft")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_dir = tmp_path / "base"
    build_hf_checkpoint(base_dir, arch)
    model = from_pretrained(str(base_dir))
    policy = L.apply_lora(model, L.LoRAConfig(rank=4, alpha=12.0, train_norms=train_norms,
                                              targets=("q_proj", "v_proj", "o_proj", "up_proj")))
    adapted = policy.model_of(_perturb(policy, scale=0.2))
    ours = np.asarray(adapted(TOKENS))
    L.save_merged(adapted, str(tmp_path / "merged"))
    merged_hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    np.testing.assert_allclose(torch_logits(merged_hf, TOKENS), ours, atol=2e-4)

    L.save_adapters(adapted, str(tmp_path / "adapters"), base_model_name_or_path=str(base_dir))
    cfg = json.loads((tmp_path / "adapters" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 12.0 and cfg["peft_type"] == "LORA"
    assert bool(cfg["modules_to_save"]) == train_norms
    base_hf = AutoModelForCausalLM.from_pretrained(str(base_dir))
    peft_model = PeftModel.from_pretrained(base_hf, str(tmp_path / "adapters"))
    peft_model.eval()
    np.testing.assert_allclose(torch_logits(peft_model, TOKENS), ours, atol=2e-4)
    assert np.abs(torch_logits(peft_model, TOKENS) - torch_logits(
        AutoModelForCausalLM.from_pretrained(str(base_dir)), TOKENS)).max() > 1e-3

    # and back: PEFT adapters load into a fresh adapted model
    fresh = from_pretrained(str(base_dir))
    L.apply_lora(fresh, L.LoRAConfig(rank=4, alpha=12.0, train_norms=train_norms,
                                      targets=("q_proj", "v_proj", "o_proj", "up_proj")))
    L.load_adapters(fresh, str(tmp_path / "adapters"))
    np.testing.assert_allclose(np.asarray(fresh(TOKENS)), ours, atol=1e-5)
