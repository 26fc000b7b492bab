"""Host-side traffic library: RoCE v2 packets (scapy), ICRC, pcap."""
