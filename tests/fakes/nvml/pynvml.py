"""A stand-in for nvidia-ml-py's `pynvml` reporting one H200, for the engines path on a machine
without a GPU. tests/unit/test_tensorrt_names.py checks each name against the real pynvml."""

GPU_NAME = "NVIDIA H200"
CAPABILITY = (9, 0)


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    if index != 0:
        raise NVMLError("Invalid Argument")
    return object()


def nvmlDeviceGetName(handle):
    return GPU_NAME


def nvmlDeviceGetCudaComputeCapability(handle):
    return CAPABILITY
