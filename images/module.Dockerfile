# ratelimit/module (images/build.sh): the module and the Lua files alone,
# with Debian's static busybox to copy them. As an init container it copies
# /ratelimit/ (ratelimit.so, ratelimit.lua, scripts/*.lua) into the volume
# mounted at /modules, for an existing Redis to load (docs/install.md).
FROM scratch
COPY bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY ratelimit/ /ratelimit/
COPY usr/ /usr/
RUN mkdir /modules && chown 65532:65532 /modules
USER 65532:65532
CMD ["cp", "-R", "/ratelimit/.", "/modules/"]
