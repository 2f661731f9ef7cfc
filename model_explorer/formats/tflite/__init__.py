def read_tflite(source):
    raise NotImplementedError
