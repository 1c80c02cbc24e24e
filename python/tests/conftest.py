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
    with 4 experts, 2 per token, 'opt', 'gpt2' with tied embeddings, or the encoder-decoders
    't5' and 'bart'), seeded, in eval mode, in `dtype`, and the modules to keep resident."""
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
    elif kind == "gpt2":  # lm_head tied to the token embedding
        cfg = tf.GPT2Config(vocab_size=512, n_embd=128, n_layer=4, n_head=4, n_positions=256,
                            bos_token_id=1, eos_token_id=2)
        model = tf.GPT2LMHeadModel(cfg)
        keep = []
    elif kind == "t5":  # encoder-decoder; lm_head and both embeddings tied to `shared`
        cfg = tf.T5Config(vocab_size=512, d_model=128, d_kv=32, d_ff=256, num_layers=3,
                          num_decoder_layers=3, num_heads=4, decoder_start_token_id=0,
                          tie_word_embeddings=True)
        model = tf.T5ForConditionalGeneration(cfg)
        keep = []
    elif kind == "bart":  # encoder-decoder with learned positions
        cfg = tf.BartConfig(vocab_size=512, d_model=128, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=4, decoder_attention_heads=4,
                            encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=256)
        model = tf.BartForConditionalGeneration(cfg)
        keep = ["model.shared"]
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
