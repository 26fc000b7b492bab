# alveo-u280: pins, clocks and clock-domain crossings of netreduce's card top (SwitchOnAlveo)
# (written by netreduce.hw.alveo.alveo_constraints from the card's user guide, UG1314; tests/test_alveo.py checks it)
# part xcu280-fsvh2892-2L-e

# the 100 MHz system clock: the CMACs' init_clk and, through an MMCM, the switch's clock
set_property PACKAGE_PIN BJ43 [get_ports sysclk0_p]
set_property PACKAGE_PIN BJ44 [get_ports sysclk0_n]
set_property IOSTANDARD LVDS [get_ports {sysclk0_p sysclk0_n}]
create_clock -period 10.000 -name sysclk0 [get_ports sysclk0_p]

# HBM_CATTRIP: driven low (the satellite controller powers the card down when it is high)
set_property PACKAGE_PIN D32 [get_ports hbm_cattrip]
set_property IOSTANDARD LVCMOS18 [get_ports hbm_cattrip]
set_property PULLTYPE PULLDOWN [get_ports hbm_cattrip]

# QSFP28 cage 0: CMAC CMACE4_X0Y5, transceivers X0Y40~X0Y43; the 156.25 MHz reference clock (MGT_SI570_CLOCK0)
set_property PACKAGE_PIN T42 [get_ports qsfp0_refclk_p]
set_property PACKAGE_PIN T43 [get_ports qsfp0_refclk_n]
create_clock -period 6.400 -name qsfp0_refclk [get_ports qsfp0_refclk_p]
set_property PACKAGE_PIN L53 [get_ports {qsfp0_rx_p[0]}]
set_property PACKAGE_PIN L54 [get_ports {qsfp0_rx_n[0]}]
set_property PACKAGE_PIN K51 [get_ports {qsfp0_rx_p[1]}]
set_property PACKAGE_PIN K52 [get_ports {qsfp0_rx_n[1]}]
set_property PACKAGE_PIN J53 [get_ports {qsfp0_rx_p[2]}]
set_property PACKAGE_PIN J54 [get_ports {qsfp0_rx_n[2]}]
set_property PACKAGE_PIN H51 [get_ports {qsfp0_rx_p[3]}]
set_property PACKAGE_PIN H52 [get_ports {qsfp0_rx_n[3]}]
set_property PACKAGE_PIN L48 [get_ports {qsfp0_tx_p[0]}]
set_property PACKAGE_PIN L49 [get_ports {qsfp0_tx_n[0]}]
set_property PACKAGE_PIN L44 [get_ports {qsfp0_tx_p[1]}]
set_property PACKAGE_PIN L45 [get_ports {qsfp0_tx_n[1]}]
set_property PACKAGE_PIN K46 [get_ports {qsfp0_tx_p[2]}]
set_property PACKAGE_PIN K47 [get_ports {qsfp0_tx_n[2]}]
set_property PACKAGE_PIN J48 [get_ports {qsfp0_tx_p[3]}]
set_property PACKAGE_PIN J49 [get_ports {qsfp0_tx_n[3]}]

# QSFP28 cage 1: CMAC CMACE4_X0Y6, transceivers X0Y44~X0Y47; the 156.25 MHz reference clock (MGT_SI570_CLOCK1)
set_property PACKAGE_PIN P42 [get_ports qsfp1_refclk_p]
set_property PACKAGE_PIN P43 [get_ports qsfp1_refclk_n]
create_clock -period 6.400 -name qsfp1_refclk [get_ports qsfp1_refclk_p]
set_property PACKAGE_PIN G53 [get_ports {qsfp1_rx_p[0]}]
set_property PACKAGE_PIN G54 [get_ports {qsfp1_rx_n[0]}]
set_property PACKAGE_PIN F51 [get_ports {qsfp1_rx_p[1]}]
set_property PACKAGE_PIN F52 [get_ports {qsfp1_rx_n[1]}]
set_property PACKAGE_PIN E53 [get_ports {qsfp1_rx_p[2]}]
set_property PACKAGE_PIN E54 [get_ports {qsfp1_rx_n[2]}]
set_property PACKAGE_PIN D51 [get_ports {qsfp1_rx_p[3]}]
set_property PACKAGE_PIN D52 [get_ports {qsfp1_rx_n[3]}]
set_property PACKAGE_PIN G48 [get_ports {qsfp1_tx_p[0]}]
set_property PACKAGE_PIN G49 [get_ports {qsfp1_tx_n[0]}]
set_property PACKAGE_PIN E48 [get_ports {qsfp1_tx_p[1]}]
set_property PACKAGE_PIN E49 [get_ports {qsfp1_tx_n[1]}]
set_property PACKAGE_PIN C48 [get_ports {qsfp1_tx_p[2]}]
set_property PACKAGE_PIN C49 [get_ports {qsfp1_tx_n[2]}]
set_property PACKAGE_PIN A49 [get_ports {qsfp1_tx_p[3]}]
set_property PACKAGE_PIN A50 [get_ports {qsfp1_tx_n[3]}]

# crossings: the asynchronous FIFOs between the switch's clock (sync) and each CMAC's user clock
set sync_clk [get_clocks -of_objects [get_pins sync_mmcm/CLKOUT0]]
set cmac0_clk [get_clocks -of_objects [get_pins cmac_0/gt_txusrclk2]]
set fastest [expr min([get_property PERIOD $sync_clk], [get_property PERIOD $cmac0_clk])]
set_max_delay -datapath_only -from $sync_clk -to $cmac0_clk $fastest
set_max_delay -datapath_only -from $cmac0_clk -to $sync_clk $fastest
set cmac1_clk [get_clocks -of_objects [get_pins cmac_1/gt_txusrclk2]]
set fastest [expr min([get_property PERIOD $sync_clk], [get_property PERIOD $cmac1_clk])]
set_max_delay -datapath_only -from $sync_clk -to $cmac1_clk $fastest
set_max_delay -datapath_only -from $cmac1_clk -to $sync_clk $fastest

# the power-on reset and the MMCM's lock come from the system clock into synchronizers
set_false_path -from [get_clocks sysclk0] -to $sync_clk
