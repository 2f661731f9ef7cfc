"""What the span kinds of the HDF5 and msgpack readers are, in one sentence each for a newcomer
(the Explorer's step-through reads them: widgets/_pages.py). `{path}`, `{value}` (the span's
value in parentheses, or nothing) and `{size}` ("12 bytes") are filled in."""

from __future__ import annotations

KIND_WORDS = {
    "h5_superblock": "{path}{value}: a field of the HDF5 superblock, which says how wide the file's "
                     "addresses are and where the root group is.",
    "h5_address": "{path}{value}: file addresses ({size}); HDF5 finds every structure by such an "
                  "address, counted from the superblock.",
    "h5_object_header": "{path}{value}: an HDF5 object header, the list of messages that says what "
                        "this group or dataset is and where its parts are.",
    "h5_btree": "{path}{value}: a node of the B-tree that indexes a group's members by name.",
    "h5_heap": "{path}{value}: a heap of the group's member names (null-terminated strings that "
               "the symbol table points into).",
    "h5_link": "{path}{value}: one member of a group, its name and the address of its object header.",
    "h5_layout": "{path}{value}: the data layout message, which says where the dataset's values "
                 "are (one contiguous range, inside the header, or in chunks).",
    "h5_attribute": "{path}{value}: an attribute, a small named value attached to a group or "
                    "dataset (Keras keeps its layer and weight names in them).",
    "h5_filters": "{path}{value}: the filter pipeline (compression, shuffle) the dataset's chunks "
                  "went through.",
    "h5_message": "{path}{value}: a header message ({size}) this view does not decode further.",
    "msgpack_data_header": "{path}{value}: the msgpack bin header before a tensor's raw bytes: "
                           "its length, so the data that follows is exactly that long.",
}
