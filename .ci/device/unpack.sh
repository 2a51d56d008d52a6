# Sourced at the start of a device command (on the H200): unpacks what pack.sh packed beside this file
# into /tmp/site and puts it, and the checkout, on PYTHONPATH. Needs no network. The H200's image has
# no zstd binary, so the archive is read with the zstandard wheel packed beside it where zstd is absent.
_fi_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p /tmp/site
if [[ ! -d /tmp/site/flashinfer ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$_fi_dir"/whl/*.whl || return 1
  if command -v zstd >/dev/null; then
    zstd -q -d --long=30 -c "$_fi_dir"/flashinfer-*.tar.zst | tar -C /tmp/site -xf - || return 1
  else
    PYTHONPATH=/tmp/site python3 - "$_fi_dir" <<'PY' || return 1
import glob, sys, tarfile, zstandard
archive = glob.glob(f"{sys.argv[1]}/flashinfer-*.tar.zst")[0]
with open(archive, "rb") as raw:
    reader = zstandard.ZstdDecompressor(max_window_size=1 << 30).stream_reader(raw)
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        tar.extractall("/tmp/site")
PY
  fi
fi
export PYTHONPATH=/tmp/site:$(git rev-parse --show-toplevel 2>/dev/null || pwd)${PYTHONPATH:+:$PYTHONPATH}
