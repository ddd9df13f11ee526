"""The contracts of speechpack: pack format, input manifests and their constants.

Imports nothing heavy (numpy only), so readers, writers and validators can all depend on it.
"""
