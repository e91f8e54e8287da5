"""The calibration readers the core uses: ``ArrayReader`` serves an array, ``RecordingReader`` records what a
reader served. ONNX Runtime's calibrator calls ``get_next()`` until it returns ``None``; lesson 02
(``lab.lessons.lesson02_the_calibration_reader``) teaches that contract and checks a student's reader against it.
"""
from __future__ import annotations

import hashlib

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from lab.data import INPUT_NAME
from lab.errors import ReaderContractError


class ArrayReader(CalibrationDataReader):
    """Serve a float32 [N, 64] array (or any array in ``dtype``) in batches, then ``None``. ``rewind()`` starts
    again."""

    def __init__(self, data: np.ndarray, batch_size: int = 32, input_name: str = INPUT_NAME, dtype=np.float32):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.data = np.ascontiguousarray(data, dtype=dtype)
        self.batch_size = int(batch_size)
        self.input_name = input_name
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self.data):
            return None
        batch = self.data[self._next:self._next + self.batch_size]
        self._next += self.batch_size
        return {self.input_name: batch}

    def rewind(self) -> None:
        self._next = 0

    def __len__(self) -> int:
        return -(-len(self.data) // self.batch_size)


# ONNX Runtime's own words for this are "No data is collected", raised by the calibrator inside quantize_static
USED_UP = ("the calibration reader served no batch at all: it is used up. That is lesson 02's mistake (b): a reader "
           "that already ran to its end gives nothing the second time. Make a fresh DigitReader for each conversion "
           "(or call reader.rewind() before reusing it)")


class RecordingReader(CalibrationDataReader):
    """Pass a reader's batches through unchanged, and record a hash and a count of what was served."""

    def __init__(self, reader, input_name: str = INPUT_NAME):
        self.reader = reader
        self.input_name = input_name
        self.samples = 0
        self.batches = 0
        self._hash = hashlib.sha256()

    def get_next(self):
        item = self.reader.get_next()
        if not item and self.batches == 0:
            raise ReaderContractError(USED_UP)
        if item:
            value = np.ascontiguousarray(item[self.input_name], dtype=np.float32)
            self._hash.update(value.tobytes())
            self.samples += len(value)
            self.batches += 1
        return item

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()
