"""Writing an episodic dataset with tensorflow-datasets, fully offline (no registration, no downloads).

Layout on disk (what :class:`prismatic_tr.data.RLDSSource` and ``tfds.builder_from_directory`` read)::

    root/name/<version>/{dataset_info.json, features.json, <name>-<split>.tfrecord-*}

The builder is a ``GeneratorBasedBuilder`` defined at run time whose ``_info`` returns a
``tfds.core.DatasetInfo`` directly (``dataset_info_from_configs()`` fails for a builder defined outside a
package); examples are generated lazily, one at a time, so a split never has to fit in memory. Nothing but
``root/name`` is written under ``root``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from prismatic_tr.data._tf import import_tf

DEFAULT_VERSION = "1.0.0"

# split name -> a function returning that split's (key, example) pairs; called when the split is written.
SplitGenerators = Mapping[str, Callable[[], Iterable[tuple[str, dict[str, Any]]]]]


def write_tfds_dataset(
    root: str | Path,
    name: str,
    features: Callable[[Any], Any],
    splits: SplitGenerators,
    version: str = DEFAULT_VERSION,
    description: str = "",
    keep_order: bool = False,
) -> Path:
    """Write ``splits`` as the tfds dataset ``root/name/version``; returns the version directory.

    Args:
        features: ``tensorflow_datasets`` module -> the top-level ``tfds.features.FeaturesDict``.
        splits: split name -> zero-argument callable yielding ``(unique key, example dict)``.
        keep_order: store the examples in the order generated (tfds' ``disable_shuffling``); by default
            tensorflow-datasets orders them by a hash of their keys.

    An existing, complete version directory is reused by tensorflow-datasets (nothing is rewritten);
    callers that must not reuse one check for it first.
    """
    if not splits:
        raise ValueError("splits must name at least one split, e.g. {'train': ...}")
    _, tfds = import_tf()
    tfds.disable_progress_bar()

    def _info(self: Any) -> Any:
        return tfds.core.DatasetInfo(builder=self, features=features(tfds), description=description,
                                     disable_shuffling=keep_order)

    def _split_generators(self: Any, dl_manager: Any) -> dict[str, Any]:
        return {split: self._generate_examples(split) for split in splits}

    def _generate_examples(self: Any, split: str) -> Any:
        yield from splits[split]()

    attrs = {
        "name": name,
        "VERSION": tfds.core.Version(version),
        "_info": _info,
        "_split_generators": _split_generators,
        "_generate_examples": _generate_examples,
    }
    with tfds.core.registered.skip_registration():
        builder_cls = type("GeneratedDataset", (tfds.core.GeneratorBasedBuilder,), attrs)
    builder = builder_cls(data_dir=str(root))
    with tempfile.TemporaryDirectory() as scratch:  # tfds creates a downloads/ folder even with nothing to fetch
        builder.download_and_prepare(download_dir=scratch,
                                     download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return Path(root) / name / version
