"""The page-image retriever on python-torch: ColPaliForRetrieval or ColQwen2ForRetrieval (AutoModelForPreTraining)
called as its processor's output calls it (ColPali: token_type_ids included, zeros: PaliGemma's attention is then
bidirectional over every attended position, padded batches as unpadded ones; ColQwen2: pixel_values padded per image
and image_grid_thw beside them) -> `embeddings` [rows, length, dim] float32, each position's vector L2-normalised and
a padded position's zero (the model's own masking)."""

from __future__ import annotations

from ...torch_encoder import TorchModel


class TorchPages(TorchModel):
    auto_class = "AutoModelForPreTraining"

    def forward(self, inputs: dict):
        if "pixel_values" in inputs:   # the model's dtype (fp16 / bf16 on CUDA)
            inputs = {**inputs, "pixel_values": inputs["pixel_values"].to(next(self.model.parameters()).dtype)}
        return self.model(**inputs).embeddings.float()
