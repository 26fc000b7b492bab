// Behavioural models of the Lattice ECP5 primitives that Amaranth's ECP5 lowering of the RGMII pins
// instantiates (hw/rgmii.py through the Versa ECP5 platform), for simulating a board top (SwitchOnRgmii).
// Written from the primitives' descriptions in Lattice's FPGA Libraries Reference Guide; functional only:
// no timing, no high impedance, no global set/reset.
//
// IDDRX1F: D sampled on a rising edge of SCLK (Q0) and on the falling edge that follows it (Q1), both shown
// from the next rising edge. ODDRX1F: D0 and D1 taken on a rising edge, Q is D0 while SCLK is high and D1
// while it is low (the first sent is D0). The device's output latency is longer (two more pipeline stages);
// every RGMII output (clock, control, data) goes through one, so a longer latency delays them alike.

`timescale 1ns / 1ps

module IB (input I, output O);
    assign O = I;
endmodule

module OBZ (input I, input T, output O);
    assign O = T ? 1'b0 : I;        // T (output disabled) never set on these pins
endmodule

module IDDRX1F (input D, input SCLK, input RST, output reg Q0, output reg Q1);
    reg rising = 1'b0, falling = 1'b0;
    initial begin Q0 = 1'b0; Q1 = 1'b0; end
    always @(posedge SCLK) rising <= D;
    always @(negedge SCLK) falling <= D;
    always @(posedge SCLK) begin
        Q0 <= rising;
        Q1 <= falling;
    end
endmodule

module ODDRX1F (input D0, input D1, input SCLK, input RST, output Q);
    reg first = 1'b0, second = 1'b0;
    always @(posedge SCLK) begin
        first <= D0;
        second <= D1;
    end
    assign Q = SCLK ? first : second;
endmodule

// D flip-flop on the rising edge of CK
module FD1S3AX (input D, input CK, output reg Q);
    initial Q = 1'b0;
    always @(posedge CK) Q <= D;
endmodule

// output flip-flop: clock enable SP, asynchronous clear CD
module OFS1P3DX (input D, input SP, input SCLK, input CD, output reg Q);
    initial Q = 1'b0;
    always @(posedge SCLK or posedge CD)
        if (CD) Q <= 1'b0;
        else if (SP) Q <= D;
endmodule
