# ghcr.io/seed-6b3823f5/ratelimit-module (images/build.sh): the module and
# the Lua files alone, with Debian's static busybox (its applets as links)
# to copy them. As an init container it copies /ratelimit/ (ratelimit.so,
# ratelimit.lua, scripts/*.lua) into the volume mounted at /modules, for an
# existing Redis to load (docs/install.md, deploy/). Nothing runs while it
# is built, so it builds for any architecture.
FROM scratch
COPY bin/ /bin/
COPY sbin/ /sbin/
COPY ratelimit/ /ratelimit/
COPY usr/ /usr/
COPY --chown=65532:65532 modules/ /modules/
USER 65532:65532
CMD ["cp", "-R", "/ratelimit/.", "/modules/"]
