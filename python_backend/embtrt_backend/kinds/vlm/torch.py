"""The VLM embedder on python-torch: the Hugging Face model (Qwen3VLModel) on the front door's feeds (input_ids,
attention_mask, mm_token_type_ids; pixel_values and image_grid_thw where the run holds images) -> the last attended
position's hidden state (right padding), L2-normalised -> [rows, hidden] float32."""

from __future__ import annotations

from ...torch_encoder import TorchModel


class TorchVlm(TorchModel):
    def forward(self, inputs: dict):
        torch = self.torch
        if "pixel_values" in inputs:   # the model's dtype (fp16 / bf16 on CUDA)
            inputs = {**inputs, "pixel_values": inputs["pixel_values"].to(next(self.model.parameters()).dtype)}
        hidden = self.model(**inputs).last_hidden_state
        mask = inputs["attention_mask"]
        last = mask.sum(dim=1) - 1
        out = hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()
        return torch.nn.functional.normalize(out, p=2, dim=-1, eps=1e-12)
