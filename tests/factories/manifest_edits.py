"""Edits of a manifest's JSON object by key path, for the tests that show each malformed manifest refused."""

from __future__ import annotations


def set_at(path, value):
    """An edit setting ``obj[path[0]][path[1]]... = value``."""
    def edit(obj):
        target = obj
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return edit


def delete_at(path):
    """An edit deleting ``obj[path[0]][path[1]]...``."""
    def edit(obj):
        target = obj
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]
    return edit
