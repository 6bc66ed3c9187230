"""Every exportable model. Builders live in tf_models.py and torch_models.py."""

from trinity.models import ModelSpec, register_model

# The paper's five networks (Table 3 sizes; batch sizes from its experiments).
register_model(ModelSpec("inception_v3", "tensorflow", "trinity.models.tf_models:build_inception_v3", 64,
                         "InceptionV3 (tf_keras.applications, weights=None) on CIFAR-10-sized images",
                         paper_table3=(12745, 21928)))
register_model(ModelSpec("nasnet_large", "tensorflow", "trinity.models.tf_models:build_nasnet_large", 8,
                         "NASNet-Large (tf_keras.applications, weights=None)", paper_table3=(18644, 27505)))
register_model(ModelSpec("pnasnet_large", "tensorflow", "trinity.models.tf_models:build_pnasnet_large", 8,
                         "PNASNet-5-Large, written from Liu et al. 2018", paper_table3=(14063, 20718)))
register_model(ModelSpec("nmt_2layer", "tensorflow", "trinity.models.tf_models:build_nmt", 64,
                         "2-layer LSTM encoder-decoder with attention (Luong et al.) on a PTB-sized vocabulary",
                         paper_table3=(16432, 24235)))
register_model(ModelSpec("gnmt", "tensorflow", "trinity.models.tf_models:build_gnmt", 64,
                         "GNMT (Wu et al. 2016): residual LSTM stacks, bidirectional first encoder layer, attention",
                         paper_table3=(8738, 16564)))
register_model(ModelSpec("tiny_cnn", "tensorflow", "trinity.models.tf_models:build_tiny_cnn", 8,
                         "a small CNN (2 conv blocks, dense head) for tests and quick runs"))
# PyTorch examples traced with make_fx.
register_model(ModelSpec("transformer_lm", "torch", "trinity.models.torch_models:build_transformer_lm", 8,
                         "a small decoder-only transformer language model"))
register_model(ModelSpec("resnet_small", "torch", "trinity.models.torch_models:build_resnet_small", 16,
                         "a ResNet-style CNN on 32x32 images"))
register_model(ModelSpec("transformer_lm12", "torch", "trinity.models.torch_models:build_transformer_lm", 8,
                         "the transformer LM with 12 blocks (deep enough to split into pipeline stages)",
                         options={"n_layers": 12}))
