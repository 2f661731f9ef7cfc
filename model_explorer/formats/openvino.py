def read_openvino(source):
    raise NotImplementedError
