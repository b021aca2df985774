#!/bin/sh
# Prints the version version.go declares: make dist, make images and
# make release read the one declaration here.
exec sed -n 's/^const Version = "\(.*\)"$/\1/p' "$(dirname "$0")/../version.go"
