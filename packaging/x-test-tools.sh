#!/usr/bin/env bash
# What the real-display test (tests/ui/test_real_display.py) and the app on an X11 desktop need
# from the system: Xvfb (a real X server without a screen), xdotool (real input events),
# ImageMagick's `import` (screenshots of the X screen) and the xcb libraries Qt 6.5+ loads on X11.
# Installed with apt-get when missing and run as root on Debian or Ubuntu; otherwise this says
# what to install, and the test says it was skipped for that reason. Never fails the set-up.
set -uo pipefail
[ "$(uname -s)" = Linux ] || exit 0
packages=""
command -v Xvfb >/dev/null || packages="$packages xvfb"
command -v xdotool >/dev/null || packages="$packages xdotool"
command -v import >/dev/null || packages="$packages imagemagick"
for lib in libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxkbcommon-x11-0; do
  dpkg -s "$lib" >/dev/null 2>&1 || packages="$packages $lib"
done
[ -n "$packages" ] || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing for the real-display test and the app on X11:$packages"
  if DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages \
       >/dev/null; then
    exit 0
  fi
  echo "could not install$packages; the real-display test will be skipped" >&2
else
  echo "the real-display test needs:$packages (sudo apt-get install$packages); it is skipped" \
       "until they are installed" >&2
fi
exit 0
