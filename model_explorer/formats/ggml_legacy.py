def read_ggml_legacy(source):
    raise NotImplementedError
