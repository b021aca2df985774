#!/usr/bin/env bash
# make publish: publishes release vVERSION (version.go's) from what make
# dist and make images built; the release workflow runs it on the tag.
# make release-dry runs it with --dry-run: everything but the pushes.
#
# It writes build/publish/, the release as it is published:
#   assets/      the files attached to the release: build/dist's (the
#                module and rls for linux-amd64 and -arm64, the Lua library
#                and scripts, the SBOM, SHA256SUMS), checked against
#                SHA256SUMS
#   notes.md     the release's text: CHANGELOG.md's section for VERSION
#   images.txt   every image reference pushed, one per line, and for each
#                version and latest the platforms its manifest list joins
# then, without --dry-run, pushes the images (images/push.sh, logging in
# with REGISTRY_USER and REGISTRY_PASSWORD) and creates the GitHub release
# vVERSION with the assets (gh, with GH_TOKEN); with --dry-run it prints
# those commands instead.
#
# Refused when the tag being released (GITHUB_REF_NAME, set by the
# workflow) is not vVERSION, or CHANGELOG.md has no section for VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
dry=
case ${1:-} in
  --dry-run) dry=--dry-run ;;
  "") ;;
  *) echo "publish: unknown argument $1 (--dry-run or none)" >&2; exit 2 ;;
esac
fail() { echo "publish: $*" >&2; exit 1; }
version=$(release/version.sh)
tag=v$version
if [ -n "${GITHUB_REF_NAME:-}" ] && [ "$GITHUB_REF_NAME" != "$tag" ]; then
  fail "the tag is $GITHUB_REF_NAME but version.go declares $version: release with make release VERSION=X.Y.Z"
fi
[ -z "$dry" ] || [ -n "${GITHUB_REF_NAME:-}" ] || echo "publish: dry run of $tag" >&2

out=build/publish
rm -rf "$out" && mkdir -p "$out/assets"
[ -f build/dist/SHA256SUMS ] || fail "build/dist/SHA256SUMS is missing: run make dist"
(cd build/dist && sha256sum --quiet -c SHA256SUMS) || fail "build/dist does not match its SHA256SUMS: run make dist"
# Exactly the files SHA256SUMS lists, and it.
extra=$(cd build/dist && comm -3 <(ls -1 | grep -vx SHA256SUMS | sort) <(cut -d' ' -f3- SHA256SUMS | sort))
[ -z "$extra" ] || fail "build/dist and its SHA256SUMS disagree on: $extra"
cp -p build/dist/* "$out/assets/"

# CHANGELOG.md's section: from its heading to the next one, heading left
# out (the release has its own title).
awk -v v="$version" '/^## \[/ { if (inside) exit; if (index($0, "## [" v "]") == 1) { inside = 1; next } }
  inside' CHANGELOG.md >"$out/notes.md"
[ -s "$out/notes.md" ] || fail "CHANGELOG.md has no \"## [$version]\" section"

# The pushes, as images/push.sh will make them (its dry run checks the
# images exist, built for the architectures their tags say).
plan=$(IMAGES_LIST=$out/images.txt images/push.sh --dry-run)

if [ -n "$dry" ]; then
  echo "$plan"
  echo "+ gh release create $tag --verify-tag --title 'ratelimit $tag' --notes-file $out/notes.md $out/assets/*"
else
  images/push.sh
  gh release create "$tag" --verify-tag --title "ratelimit $tag" --notes-file "$out/notes.md" "$out"/assets/*
fi
echo "publish: $tag: $(ls "$out/assets" | wc -l) files, $(wc -l <"$out/images.txt") image references (build/publish)" >&2
