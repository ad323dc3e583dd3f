"""Getting a judge and its backbones: the one loader (`loading`), the paper's released judges (`release`), their
conversion from the reference release (`reference_checkpoint`) and the offline backbones (`backbones`)."""
