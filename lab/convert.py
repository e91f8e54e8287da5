"""Thin wrappers over ONNX Runtime's converters that record everything that decided the result."""
from __future__ import annotations

import contextlib
import json
import logging
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static
from onnxruntime.quantization.calibrate import create_calibrator

from lab.data import data_sha256, file_sha256
from lab.readers import ArrayReader, RecordingReader

# ORT logs "Please consider to run pre-processing" on every unprocessed model; the
# lessons teach pre-processing in lesson 08, so keep the hint out of every cell.
logging.getLogger().setLevel(logging.ERROR)


class _Keep(logging.Handler):
    """Keeps each record's message in ``messages``, printing nothing."""

    def __init__(self, messages: list[str]):
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def ort_warnings() -> Iterator[list[str]]:
    """Within the block, collect the warnings ONNX Runtime's quantizer logs (through the root logger, which this
    module keeps at ERROR, so they would be dropped): yields the list each message is appended to, in order. The
    root's own handlers (a notebook's stderr) are set aside meanwhile, so nothing is also printed."""
    root = logging.getLogger()
    messages: list[str] = []
    level, handlers = root.level, root.handlers[:]
    root.handlers = [_Keep(messages)]
    root.setLevel(logging.WARNING)
    try:
        yield messages
    finally:
        root.setLevel(level)
        root.handlers = handlers


def versions() -> dict[str, str]:
    """The tool versions that decide a conversion's bytes."""
    return {"python": platform.python_version(), "onnx": onnx.__version__,
            "onnxruntime": ort.__version__, "numpy": np.__version__}


@dataclass
class QuantRecord:
    """Everything that decided one conversion: inputs, settings, calibration data, versions."""

    source: str
    output: str
    source_sha256: str
    output_sha256: str
    settings: dict
    calibration_sha256: str | None
    calibration_samples: int
    calibration_batches: int
    versions: dict = field(default_factory=versions)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


class QuantizeSettings(TypedDict, total=False):
    """``quantize``'s keyword settings as one value (``convert.quantize(src, out, data, **settings)``), so that a
    lesson's settings dict is checked against ``quantize``'s parameters. Not ``batch_size``: how the calibration
    data is served is each call's own, passed beside the settings."""

    quant_format: str
    activation_type: str
    weight_type: str
    per_channel: bool
    reduce_range: bool
    calibrate_method: str
    nodes_to_exclude: list[str] | None
    extra_options: dict | None
    calibration_cache_path: str | Path | None


def _enum(kind, value):
    return value if isinstance(value, kind) else kind[value]


def quantize(source: str | Path, output: str | Path, calibration, *, quant_format: str = "QDQ",
             activation_type: str = "QInt8", weight_type: str = "QInt8", per_channel: bool = False,
             reduce_range: bool = False, calibrate_method: str = "MinMax", batch_size: int = 32,
             nodes_to_exclude: list[str] | None = None, extra_options: dict | None = None,
             calibration_cache_path: str | Path | None = None) -> QuantRecord:
    """Static quantization of ``source`` into ``output``, calibrated on ``calibration``.

    ``calibration`` is a float32 [N, 64] array (served in ``batch_size`` batches) or any
    CalibrationDataReader; either way the served samples are hashed and counted.
    Settings are names (``"QDQ"``, ``"QInt8"``, ``"MinMax"``) so the record is plain JSON.
    """
    source, output = Path(source), Path(output)
    if source.resolve() == output.resolve():
        raise ValueError(f"output {output} would overwrite its source; write to a new file")
    reader = ArrayReader(calibration, batch_size) if isinstance(calibration, np.ndarray) else calibration
    recorder = RecordingReader(reader) if reader is not None else None
    settings = {"quant_format": str(quant_format), "activation_type": str(activation_type),
                "weight_type": str(weight_type), "per_channel": bool(per_channel),
                "reduce_range": bool(reduce_range), "calibrate_method": str(calibrate_method),
                "nodes_to_exclude": list(nodes_to_exclude or []),
                "extra_options": dict(extra_options or {})}
    if isinstance(calibration, np.ndarray):
        settings["batch_size"] = int(batch_size)
    start = time.perf_counter()
    quantize_static(str(source), str(output), recorder,
                    quant_format=_enum(QuantFormat, quant_format),
                    activation_type=_enum(QuantType, activation_type),
                    weight_type=_enum(QuantType, weight_type),
                    per_channel=per_channel, reduce_range=reduce_range,
                    calibrate_method=_enum(CalibrationMethod, calibrate_method),
                    nodes_to_exclude=nodes_to_exclude, extra_options=extra_options,
                    calibration_cache_path=str(calibration_cache_path) if calibration_cache_path else None)
    seconds = time.perf_counter() - start
    served = recorder if recorder is not None and recorder.samples > 0 else None
    if isinstance(calibration, np.ndarray) and served is not None:
        assert served.sha256 == data_sha256(calibration)
    return QuantRecord(str(source), str(output), file_sha256(source), file_sha256(output), settings,
                       served.sha256 if served is not None else None,
                       served.samples if served is not None else 0, served.batches if served is not None else 0,
                       seconds=round(seconds, 3))


def quantize_dynamic_model(source: str | Path, output: str | Path, weight_type: str = "QInt8",
                           per_channel: bool = False) -> QuantRecord:
    """Dynamic quantization: weights to INT8 now, activation ranges computed at run time."""
    start = time.perf_counter()
    quantize_dynamic(str(source), str(output), weight_type=_enum(QuantType, weight_type),
                     per_channel=per_channel)
    return QuantRecord(str(source), str(output), file_sha256(source), file_sha256(output),
                       {"mode": "dynamic", "weight_type": weight_type, "per_channel": per_channel},
                       None, 0, 0, seconds=round(time.perf_counter() - start, 3))


def calibrated_ranges(source: str | Path, calibration, method: str = "MinMax", batch_size: int = 32,
                      extra_options: dict | None = None) -> dict[str, tuple[float, float]]:
    """The ranges ONNX Runtime's own calibrator computes: tensor name -> (lowest, highest).

    Uses ``create_calibrator`` / ``collect_data`` / ``compute_data`` on a copy of ``source`` in a
    temporary folder (ORT writes ``<model>-inferred.onnx`` beside the model it is given), so
    ``source`` is never written next to. ``calibration`` is an array or a reader.
    """
    reader = ArrayReader(calibration, batch_size) if isinstance(calibration, np.ndarray) else calibration
    with tempfile.TemporaryDirectory(prefix="lab-calib-") as tmp:
        copy = Path(tmp) / "source.onnx"
        shutil.copyfile(source, copy)
        calibrator = create_calibrator(copy, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=_enum(CalibrationMethod, method),
                                       extra_options=extra_options or {})
        try:
            calibrator.collect_data(reader)
            data = calibrator.compute_data()
        finally:
            calibrator.clear_collected_data() if hasattr(calibrator, "clear_collected_data") else None
    return {name: (float(np.asarray(td.range_value[0]).reshape(-1)[0]),
                   float(np.asarray(td.range_value[1]).reshape(-1)[0]))
            for name, td in data.data.items()}
