"""The model one level above the bytes: hyperparameters from config.json or GGUF metadata, the
tokenizer, and (as they land) expected tensors, memory and adapters. The doctor, the model card,
repair and the demo all read them from here."""
