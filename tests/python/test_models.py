"""Real model definitions on tpu vs CPU: transformers BERT and GPT-2 built from
config (no downloaded weights), a small CNN; forward and a training step,
with no CPU fallback."""
import pytest
import torch
import torch.nn as nn

import torchtpu

transformers = pytest.importorskip("transformers")


def _no_fallback():
    assert torchtpu.metrics.fallback_counts() == {}, torchtpu.metrics.fallback_counts()


@pytest.mark.slow
def test_bert_from_config_forward_and_backward():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cpu = BertModel(cfg)
    ids = torch.randint(0, 100, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    ref = cpu(ids, attention_mask=mask)
    ref.last_hidden_state.pow(2).mean().backward()
    ref_grads = {n: p.grad.clone() for n, p in cpu.named_parameters() if p.grad is not None}
    torch.manual_seed(0)
    dev = BertModel(cfg).to("tpu")
    torchtpu.metrics.reset()
    out = dev(ids.to("tpu"), attention_mask=mask.to("tpu"))
    torch.testing.assert_close(out.last_hidden_state.cpu(), ref.last_hidden_state,
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.pooler_output.cpu(), ref.pooler_output, rtol=1e-4, atol=1e-5)
    out.last_hidden_state.pow(2).mean().backward()
    for n, p in dev.named_parameters():
        if n in ref_grads:
            torch.testing.assert_close(p.grad.cpu(), ref_grads[n], rtol=1e-3, atol=1e-5)
    _no_fallback()


@pytest.mark.slow
def test_gpt2_from_config_training_step():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=0)
    cpu = GPT2LMHeadModel(cfg)
    torch.manual_seed(0)
    dev = GPT2LMHeadModel(cfg).to("tpu")
    assert dev.lm_head.weight is dev.transformer.wte.weight      # tied and still tied
    ids = torch.randint(0, 100, (2, 12))
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-3)
    torchtpu.metrics.reset()
    for _ in range(3):
        lc = cpu(ids, labels=ids).loss
        ld = dev(ids.to("tpu"), labels=ids.to("tpu")).loss
        assert abs(ld.item() - lc.item()) <= 1e-4 * abs(lc.item())
        opt_c.zero_grad()
        opt_d.zero_grad()
        lc.backward()
        ld.backward()
        opt_c.step()
        opt_d.step()
    _no_fallback()


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Dropout(0.0), nn.Linear(16, 10))

    def forward(self, x):
        return self.f(x)


@pytest.mark.slow
def test_small_cnn_training_steps_match_cpu():
    torch.manual_seed(0)
    cpu = SmallCNN()
    torch.manual_seed(0)
    dev = SmallCNN().to("tpu")
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.05, momentum=0.9)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(3)
    torchtpu.metrics.reset()
    for _ in range(3):
        x = torch.randn(4, 3, 16, 16, generator=g)
        y = torch.randint(0, 10, (4,), generator=g)
        lc = nn.functional.cross_entropy(cpu(x), y)
        ld = nn.functional.cross_entropy(dev(x.to("tpu")), y.to("tpu"))
        assert abs(ld.item() - lc.item()) <= 1e-4 * abs(lc.item())
        for o, l in ((opt_c, lc), (opt_d, ld)):
            o.zero_grad()
            l.backward()
            o.step()
    for (n, a), b in zip(cpu.state_dict().items(), dev.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-4, msg=n)
    _no_fallback()
