"""Shared fixtures: a sim device, and Hugging Face models built from small configs with seeded
random weights (no hub download)."""
from __future__ import annotations

import copy

import pytest

import htp


@pytest.fixture
def sim():
    return htp.make_device("sim")


@pytest.fixture
def pager(sim):
    return htp.Pager(sim, hbm_budget="1MiB", host_budget="4MiB", slab_bytes="1MiB", page_bytes=4096)


def build_model(kind: str, dtype):
    """A small transformers model of `kind` ('llama' with grouped-query attention, 'mixtral'
    with 4 experts, 2 per token, or 'opt'), seeded, in eval mode, in `dtype`."""
    import torch
    import transformers as tf

    torch.manual_seed(1234)
    if kind == "llama":
        cfg = tf.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                             num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=256)
        model = tf.LlamaForCausalLM(cfg)
        keep = ["model.embed_tokens", "lm_head"]
    elif kind == "mixtral":
        cfg = tf.MixtralConfig(vocab_size=512, hidden_size=128, intermediate_size=128,
                               num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                               num_local_experts=4, num_experts_per_tok=2,
                               max_position_embeddings=256)
        model = tf.MixtralForCausalLM(cfg)
        keep = ["model.embed_tokens", "lm_head"]
    elif kind == "opt":
        cfg = tf.OPTConfig(vocab_size=512, hidden_size=128, ffn_dim=256, num_hidden_layers=4,
                           num_attention_heads=4, max_position_embeddings=256,
                           word_embed_proj_dim=128)
        model = tf.OPTForCausalLM(cfg)
        keep = ["model.decoder.embed_tokens", "model.decoder.embed_positions"]
    else:
        raise ValueError(kind)
    model = model.to(dtype).eval()
    return model, keep


def check_compressed_paging(m: dict) -> None:
    """A model offloaded with compress=True paged compressed tensors, evicting, with fewer bytes on
    the link than it delivered."""
    assert m["compressed_tensors"] > 0 and m["evictions"] > 0
    assert m["page_in_wire_bytes"] < m["page_in_bytes"]


@pytest.fixture
def clone():
    return copy.deepcopy
