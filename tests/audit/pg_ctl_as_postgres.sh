#!/bin/sh
# pg_ctl for pytest-postgresql when the tests run as root (CI containers): initdb and the
# server refuse to run as root, so run pg_ctl as the unprivileged `postgres` user (created
# by Debian's postgresql package), after handing it the directories pytest created for it.
# PG_CTL_REAL is the real pg_ctl (set by tests/audit/conftest.py).
# The server must not inherit mirakuru's process marker: mirakuru (loaded by every pytest run
# in this environment) SIGKILLs, at exit, all processes whose marker *contains* its own pid as
# a substring, so an unrelated pytest run could kill this cluster mid-session. pytest-postgresql
# stops the server with `pg_ctl stop`, which does not need the marker.
set -eu
REAL=${PG_CTL_REAL:?}
unset mirakuru_uuid
if [ "$(id -u)" != 0 ]; then exec "$REAL" "$@"; fi
prev=""
for a in "$@"; do
  target=""
  case "$prev" in -D|--pgdata|-l|--log) target=$a ;; esac
  case "$a" in --pgdata=*) target=${a#--pgdata=} ;; esac
  if [ -n "$target" ]; then
    parent=$(dirname "$target")
    mkdir -p "$parent"
    chown postgres "$parent"
    d=$parent
    while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
  fi
  prev=$a
done
cd /
exec runuser -u postgres -- "$REAL" "$@"
