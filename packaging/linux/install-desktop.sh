#!/usr/bin/env bash
# Put ContextLens in the desktop's application menu, with its icon, and make .ctxlens session
# exports open in it, for the current user only (under ${XDG_DATA_HOME:-~/.local/share}).
#
#   packaging/linux/install-desktop.sh              install (or refresh) the entry
#   packaging/linux/install-desktop.sh --uninstall  remove everything it installed
#   add --plain to copy the files by hand even where the xdg-utils are installed
#
# The xdg-utils (xdg-desktop-menu, xdg-mime, xdg-icon-resource) are used when present; otherwise
# the files are copied and the desktop, MIME and icon caches are updated by their own tools.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Two homes: packaging/linux/ in a checkout, or desktop/ inside the packaged folder (beside the
# `contextlens` executable and _internal/, where `make package` puts a copy of these files).
if [ -d "$here/../_internal/resources/icons" ]; then
    root="$(cd "$here/.." && pwd)"
    icons="$root/_internal/resources/icons"
    bundled="$root/contextlens"  # the menu entry always starts this folder's own app
else
    root="$(cd "$here/../.." && pwd)"
    icons="$root/resources/icons"
    bundled=""
fi
data="${XDG_DATA_HOME:-$HOME/.local/share}"
sizes="16 32 48 64 128 256 512"
app_icon="contextlens"
mime_icon="application-x-contextlens-session"
mime_type="application/x-contextlens-session"

mode="install"
plain=0
for arg in "$@"; do
    case "$arg" in
        --uninstall) mode="uninstall" ;;
        --plain) plain=1 ;;
        -h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "install-desktop.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

have() { command -v "$1" >/dev/null 2>&1; }
if [ "$plain" = 0 ] && have xdg-desktop-menu && have xdg-mime && have xdg-icon-resource; then
    xdg=1
else
    xdg=0
fi

# From the packaged folder the menu entry names its executable by its full path. From a checkout
# it runs `contextlens` from PATH; the checkout's launcher lives in .venv/bin, so the installed
# copy names that one by its full path when PATH has none.
desktop_file() {
    local out="$1" launcher="$bundled"
    if [ -z "$launcher" ] && ! have contextlens && [ -x "$root/.venv/bin/contextlens" ]; then
        launcher="$root/.venv/bin/contextlens"
    fi
    if [ -n "$launcher" ]; then
        sed -e "s|^Exec=contextlens |Exec=$launcher |" -e "s|^TryExec=contextlens$|TryExec=$launcher|" \
            "$here/contextlens.desktop" >"$out"
    else
        cp "$here/contextlens.desktop" "$out"
    fi
}

refresh_caches() {
    if have update-desktop-database; then update-desktop-database -q "$data/applications" || true; fi
    if have update-mime-database; then update-mime-database "$data/mime" >/dev/null || true; fi
    if have gtk-update-icon-cache; then
        gtk-update-icon-cache -q -t -f "$data/icons/hicolor" 2>/dev/null || true
    fi
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

install_entry() {
    desktop_file "$tmp/contextlens.desktop"
    cp "$here/contextlens-mime.xml" "$tmp/contextlens.xml"
    mkdir -p "$data/icons/hicolor/scalable/apps" "$data/icons/hicolor/scalable/mimetypes"
    cp "$icons/contextlens.svg" "$data/icons/hicolor/scalable/apps/$app_icon.svg"
    cp "$icons/contextlens.svg" "$data/icons/hicolor/scalable/mimetypes/$mime_icon.svg"
    if [ "$xdg" = 1 ]; then
        for size in $sizes; do
            xdg-icon-resource install --mode user --noupdate --novendor --context apps \
                --size "$size" "$icons/contextlens-$size.png" "$app_icon"
            xdg-icon-resource install --mode user --noupdate --novendor --context mimetypes \
                --size "$size" "$icons/contextlens-$size.png" "$mime_icon"
        done
        xdg-icon-resource forceupdate --mode user || true
        xdg-mime install --mode user --novendor "$tmp/contextlens.xml"
        xdg-desktop-menu install --mode user --novendor "$tmp/contextlens.desktop"
        xdg-mime default contextlens.desktop "$mime_type" || true
    else
        mkdir -p "$data/applications" "$data/mime/packages"
        cp "$tmp/contextlens.desktop" "$data/applications/contextlens.desktop"
        cp "$tmp/contextlens.xml" "$data/mime/packages/contextlens.xml"
        for size in $sizes; do
            for context in apps mimetypes; do
                mkdir -p "$data/icons/hicolor/${size}x${size}/$context"
            done
            cp "$icons/contextlens-$size.png" "$data/icons/hicolor/${size}x${size}/apps/$app_icon.png"
            cp "$icons/contextlens-$size.png" \
                "$data/icons/hicolor/${size}x${size}/mimetypes/$mime_icon.png"
        done
        refresh_caches
    fi
    echo "ContextLens is in the application menu; .ctxlens files open in it ($data)."
}

uninstall_entry() {
    if [ "$xdg" = 1 ]; then
        xdg-desktop-menu uninstall --mode user --novendor contextlens.desktop || true
        cp "$here/contextlens-mime.xml" "$tmp/contextlens.xml"  # it goes by the installed name
        xdg-mime uninstall --mode user --novendor "$tmp/contextlens.xml" || true
        for size in $sizes; do
            xdg-icon-resource uninstall --mode user --noupdate --context apps --size "$size" \
                "$app_icon" || true
            xdg-icon-resource uninstall --mode user --noupdate --context mimetypes \
                --size "$size" "$mime_icon" || true
        done
    fi
    # the defaults that `xdg-mime default` and xdg-desktop-menu set to ContextLens, nothing else
    for list in "${XDG_CONFIG_HOME:-$HOME/.config}/mimeapps.list" "$data/applications/defaults.list"; do
        if [ -f "$list" ]; then sed -i '/^[^=]*=contextlens\.desktop;\{0,1\}$/d' "$list"; fi
    done
    # whatever either way put there (the xdg-utils may have been installed or removed since)
    rm -f "$data/applications/contextlens.desktop" "$data/mime/packages/contextlens.xml" \
        "$data/mime/packages/contextlens-mime.xml" \
        "$data/icons/hicolor/scalable/apps/$app_icon.svg" \
        "$data/icons/hicolor/scalable/mimetypes/$mime_icon.svg"
    for size in $sizes; do
        rm -f "$data/icons/hicolor/${size}x${size}/apps/$app_icon.png" \
            "$data/icons/hicolor/${size}x${size}/mimetypes/$mime_icon.png"
    done
    mkdir -p "$data/applications" "$data/mime/packages" "$data/icons/hicolor"
    refresh_caches
    echo "ContextLens is no longer in the application menu ($data)."
}

if [ "$mode" = "install" ]; then install_entry; else uninstall_entry; fi
