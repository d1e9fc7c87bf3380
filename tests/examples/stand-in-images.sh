#!/bin/sh
# The container images the example repos name (python:3.11-slim-bookworm,
# redis:7-bookworm), made inside a production box from the box's own Debian
# packages, for tests: Docker in a test's box has no internet to pull them from.
# Each image holds the program, what it needs to run (Python's standard
# library, without its tests) and every shared library it loads, found with
# ldd. On a host with internet, compose pulls the real images instead.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/empty/tmp" "$work/empty/data"
chmod 1777 "$work/empty/tmp"

# The shared libraries (and the loader) the given programs load.
libs() {
    ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u
}

# image TAG CHANGES PATHS...: a tar of PATHS (symlinks followed) and the empty
# /tmp and /data, imported as TAG with the Dockerfile lines in CHANGES (one a line).
image() {
    tag=$1 changes=$2
    shift 2
    tar -ch --exclude=python3.11/test --exclude=__pycache__ -f "$work/image.tar" \
        "$@" -C "$work/empty" tmp data
    set --
    while IFS= read -r line; do
        [ -n "$line" ] && set -- "$@" -c "$line"
    done <<CHANGES
$changes
CHANGES
    docker import "$@" "$work/image.tar" "$tag" >/dev/null
    echo "$tag"
}

image python:3.11-slim-bookworm 'ENV PATH=/usr/local/bin:/usr/bin:/bin
CMD ["python3"]' \
    /usr/bin/python3 /usr/bin/python3.11 /usr/lib/python3.11 /etc/python3.11 \
    $(libs /usr/bin/python3.11 /usr/lib/python3.11/lib-dynload/*.so)

image redis:7-bookworm 'WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]' \
    /usr/bin/redis-server $(libs /usr/bin/redis-server)
