"""The PySide6 desktop app. It observes core events and drives core calls; no engine code here."""
