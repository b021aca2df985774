#!/bin/sh
# The entry point of ghcr.io/seed-6b3823f5/ratelimit-redis and -valkey.
# With no command, or with server options alone (docker run
# ghcr.io/seed-6b3823f5/ratelimit-redis --maxmemory 1gb), the server starts
# with the module loaded, listening on every address of the container,
# keeping its data in /data; any other command (redis-cli, sh,
# redis-server with a config file of your own) runs as given.
set -e
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- "$RATELIMIT_SERVER" --loadmodule /usr/lib/ratelimit/ratelimit.so \
    --bind '* -::*' --protected-mode no --dir /data "$@"
fi
exec "$@"
