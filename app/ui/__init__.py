"""The PySide6 desktop app. It observes core events and drives core calls; no engine code here.

Importing it changes nothing in the process: the entry point (app/ui/main.py) sets what the
window needs process-wide, such as the thread switch interval (app/ui/switch_interval.py).
"""
