#!/usr/bin/env bash
# Builds the release binaries of one version, from a clean checkout of its
# tag (docs/releasing.md):
#   ./scripts/release.sh v0.1.0 [OUTDIR]
# writes OUTDIR (default dist/) sluice_<version>_linux_<arch>.tar.gz for
# each of RELEASE_PLATFORMS (default "linux/amd64 linux/arm64"), each with
# the binary, LICENSE, README.md and CHANGELOG.md, and SHA256SUMS.
# The binaries are static (CGO_ENABLED=0), built with -trimpath, stripped
# (-s -w) and stamped with the version and the commit, as the image's are.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:?usage: $0 VERSION [OUTDIR], e.g. $0 v0.1.0}"
out="${2:-dist}"
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  { echo "release: version $version is not vMAJOR.MINOR.PATCH[-PRERELEASE]" >&2; exit 1; }
commit="$(git rev-parse HEAD)"
if [ -z "${RELEASE_ALLOW_DIRTY:-}" ] && [ -n "$(git status --porcelain)" ]; then
  echo "release: the work tree has changes; release from a clean checkout of the tag (RELEASE_ALLOW_DIRTY=1 to build anyway)" >&2
  exit 1
fi
mkdir -p "$out"
pkg=github.com/sluicehq/sluice/internal/cli
for platform in ${RELEASE_PLATFORMS:-linux/amd64 linux/arm64}; do
  os="${platform%/*}" arch="${platform#*/}"
  name="sluice_${version}_${os}_${arch}"
  dir="$(mktemp -d)"
  mkdir "$dir/$name"
  CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath \
    -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit" \
    -o "$dir/$name/sluice" ./cmd/sluice
  cp LICENSE README.md CHANGELOG.md "$dir/$name/"
  tar -C "$dir" --owner=0 --group=0 --numeric-owner -czf "$out/$name.tar.gz" "$name"
  rm -rf "$dir"
  echo "$out/$name.tar.gz"
done
(cd "$out" && sha256sum sluice_"${version}"_*.tar.gz > SHA256SUMS)
echo "$out/SHA256SUMS"
