"""One module per input family; each turns its input manifest into ``PackedSample``s.

``ADAPTERS`` maps the name used by ``speechpack build NAME`` to the adapter's entry points.
"""

from packer.adapters.audio_bank import load_bank_file, load_simulated, read_bank_input
from packer.adapters.wesep import load_wesep_sample, read_wesep_list

__all__ = ["load_bank_file", "load_simulated", "load_wesep_sample", "read_bank_input", "read_wesep_list"]
