"""Model shapes of the newer families at their published sizes (random weights), as
`rlvr.models.ModelConfig` fields: `benchmarks/model.py` and `benchmarks/hf_train_loop.py` take
them by name (no imports beyond the standard library, so importing it changes no settings)."""

# Qwen2 / Qwen2.5 shapes (random weights): q/k/v bias, tied embeddings.
QWEN2_SIZES = {
    # Qwen2(.5)-0.5B: 24 layers, d 896, 14 q / 2 kv heads of 64 (0.49 B).
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                         num_heads=14, num_kv_heads=2, head_dim=64, tie_word_embeddings=True,
                         attention_bias=True, architecture="qwen2", rope_theta=1e6,
                         max_position_embeddings=32768),
    # Qwen2.5-1.5B: 28 layers, d 1536, 12 q / 2 kv heads of 128 (1.5 B).
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                         num_heads=12, num_kv_heads=2, head_dim=128, tie_word_embeddings=True,
                         attention_bias=True, architecture="qwen2", rope_theta=1e6,
                         max_position_embeddings=32768),
}

FAMILY_SIZES = {
    # Qwen3-0.6B: 28 layers, d 1024, 16 q / 8 kv heads of 128, q/k norms, tied (0.6 B).
    "qwen3-0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_layers=28,
                       num_heads=16, num_kv_heads=8, head_dim=128, tie_word_embeddings=True,
                       qk_norm=True, architecture="qwen3", rope_theta=1e6,
                       max_position_embeddings=40960),
    # Qwen3-1.7B: 28 layers, d 2048, 16 q / 8 kv heads of 128, tied (1.7 B).
    "qwen3-1.7b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_layers=28,
                       num_heads=16, num_kv_heads=8, head_dim=128, tie_word_embeddings=True,
                       qk_norm=True, architecture="qwen3", rope_theta=1e6,
                       max_position_embeddings=40960),
    # Gemma-3-1B: 26 layers (5 local : 1 global, window 512), d 1152, 4 q / 1 kv heads of 256,
    # 262,144-token vocabulary, tied (1.0 B).
    "gemma3-1b": dict(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_layers=26,
                      num_heads=4, num_kv_heads=1, head_dim=256, tie_word_embeddings=True,
                      architecture="gemma3_text", qk_norm=True, norm_unit_offset=True,
                      sandwich_norms=True, scale_embeddings=True, hidden_act="gelu_pytorch_tanh",
                      query_pre_attn_scalar=256, sliding_window=512,
                      layer_types=tuple("full_attention" if (i + 1) % 6 == 0
                                        else "sliding_attention" for i in range(26)),
                      rope_theta=1e6, local_rope_theta=1e4, max_position_embeddings=32768),
    # A small Qwen3-MoE (not a published checkpoint): Qwen3-30B-A3B's block design at 12 layers,
    # d 1024, 64 experts of 384, top 8 (1.3 B parameters, 0.50 B active per token).
    "qwen3moe-small": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                           num_layers=12, num_heads=16, num_kv_heads=8, head_dim=128,
                           qk_norm=True, architecture="qwen3_moe", rope_theta=1e6,
                           num_experts=64, num_experts_per_tok=8, moe_intermediate_size=384,
                           norm_topk_prob=True, router_aux_loss_coef=0.001,
                           max_position_embeddings=40960),
}

