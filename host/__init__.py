"""Host-side traffic library: RoCE v2 packets (scapy), ICRC, pcap.

The names below are loaded on first use, so that importing ``netreduce.host.icrc`` or
``netreduce.host.pcap`` alone does not pay for importing scapy's packet layers.

- :mod:`.packets`: scapy layers RETH, ImmDt, DETH, IETH bound under BTH; ``roce_packet``,
  ``build_roce_frame``, ``build_ack``, ``build_cnp``, ``dissect``.
- :mod:`.icrc`: ``compute_icrc``, ``icrc_ok``, ``fix_icrc``, ``ipv4_checksum``, ``ipv4_checksum_ok``.
- :mod:`.pcap`: ``read_pcap``, ``read_pcap_timed``, ``write_pcap``.
- :mod:`.strategies`: hypothesis strategies (tests only; import it explicitly).
"""

import importlib

_EXPORTS = {
    "packets": ["BTH", "AETH", "CNPPadding", "RETH", "ImmDt", "DETH", "IETH", "EXTENSION_LAYERS",
                "extension_layers", "roce_packet", "build_roce_frame", "build_ack", "build_cnp", "dissect",
                "CNP_OPCODE"],
    "icrc": ["compute_icrc", "icrc_ok", "fix_icrc", "ipv4_checksum", "ipv4_checksum_ok", "icrc_span"],
    "pcap": ["read_pcap", "read_pcap_timed", "write_pcap"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
