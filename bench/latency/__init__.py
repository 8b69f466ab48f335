"""The admission latency study: the apiserver's own histogram of podium's webhook in a burst of
pod creations, with ``zone-chooser: hold`` and with the immediate pin (``python -m bench burst``).
"""
