"""The JVM data source ``hybridmq-export`` (Java sources in ``jvm/src``), built into a cached jar.

The jar is compiled with ``javac`` against the jars of the installed pyspark and cached under
``~/.cache/hybridmq/spark-jvm/`` (``HYBRIDMQ_CACHE`` overrides ``~/.cache/hybridmq``), named by a
hash of the sources and the pyspark version, so a change of either builds a new one.
``python -m hybridmq.spark.jar`` builds it if needed and prints its path (``make setup`` does so;
``spark-submit --jars "$(python -m hybridmq.spark.jar)"`` uses it outside ``build_session``).
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

SOURCES = Path(__file__).resolve().parent / "jvm" / "src"


class JarBuildError(RuntimeError):
    """The jar could not be built (no ``javac``, or the sources do not compile)."""


def _source_files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def _pyspark_jars() -> Path:
    return Path(pyspark.__file__).resolve().parent / "jars"


def jar_path() -> Path:
    """Where the jar of these sources and this pyspark lives (whether built yet or not)."""
    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in _source_files():
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    cache = Path(os.environ.get("HYBRIDMQ_CACHE", Path.home() / ".cache" / "hybridmq"))
    return cache / "spark-jvm" / f"hybridmq-spark-{digest.hexdigest()[:16]}.jar"


def ensure_jar() -> Path:
    """The jar's path, compiling it first when it is not cached yet."""
    target = jar_path()
    if target.is_file():
        return target
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise JarBuildError("javac and jar (a JDK 17) are needed to build the hybridmq-export source")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        classes = Path(tmp) / "classes"
        java = [str(p) for p in _source_files() if p.suffix == ".java"]
        classpath = str(_pyspark_jars() / "*")
        _run([javac, "-nowarn", "--release", "17", "-cp", classpath, "-d", str(classes), *java])
        shutil.copytree(SOURCES / "META-INF", classes / "META-INF")
        built = Path(tmp) / target.name
        _run([jar, "cf", str(built), "-C", str(classes), "."])
        os.replace(built, target)  # atomic: concurrent builders of the same sources write the same jar
    return target


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JarBuildError(f"{Path(command[0]).name} failed ({done.returncode}):\n{done.stderr[-4000:]}")


def main() -> int:
    try:
        print(ensure_jar())
    except JarBuildError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
