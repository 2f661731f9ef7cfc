"""One byte formatter, one convention (binary units), the same as js/src/format.js."""

from model_explorer.units import format_bytes


def test_sizes_read_in_binary_units():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(98362432) == "93.8 MiB"  # the SmolLM2 sample, as the demo prints it
    assert format_bytes(20 * 2**30) == "20.0 GiB"
    assert format_bytes(None) == "?"
