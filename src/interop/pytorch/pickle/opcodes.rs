//! The pickle protocol's opcodes, by the names `CPython`'s `pickletools` and `pickle.py` give
//! them (protocols 0 to 5), and each opcode's name for errors.

// Protocol 0 and 1.
/// Pushes a mark on the stack, which a later opcode pops everything above.
pub(super) const MARK: u8 = b'(';
/// The end of the pickle: its top object is the stack's top.
pub(super) const STOP: u8 = b'.';
pub(super) const POP: u8 = b'0';
pub(super) const POP_MARK: u8 = b'1';
pub(super) const DUP: u8 = b'2';
pub(super) const FLOAT: u8 = b'F';
pub(super) const INT: u8 = b'I';
pub(super) const BININT: u8 = b'J';
pub(super) const BININT1: u8 = b'K';
pub(super) const LONG: u8 = b'L';
pub(super) const BININT2: u8 = b'M';
pub(super) const NONE: u8 = b'N';
pub(super) const PERSID: u8 = b'P';
pub(super) const BINPERSID: u8 = b'Q';
pub(super) const REDUCE: u8 = b'R';
pub(super) const STRING: u8 = b'S';
pub(super) const BINSTRING: u8 = b'T';
pub(super) const SHORT_BINSTRING: u8 = b'U';
pub(super) const UNICODE: u8 = b'V';
pub(super) const BINUNICODE: u8 = b'X';
pub(super) const APPEND: u8 = b'a';
pub(super) const BUILD: u8 = b'b';
pub(super) const GLOBAL: u8 = b'c';
pub(super) const DICT: u8 = b'd';
pub(super) const EMPTY_DICT: u8 = b'}';
pub(super) const APPENDS: u8 = b'e';
pub(super) const GET: u8 = b'g';
pub(super) const BINGET: u8 = b'h';
pub(super) const INST: u8 = b'i';
pub(super) const LONG_BINGET: u8 = b'j';
pub(super) const LIST: u8 = b'l';
pub(super) const EMPTY_LIST: u8 = b']';
pub(super) const OBJ: u8 = b'o';
pub(super) const PUT: u8 = b'p';
pub(super) const BINPUT: u8 = b'q';
pub(super) const LONG_BINPUT: u8 = b'r';
pub(super) const SETITEM: u8 = b's';
pub(super) const TUPLE: u8 = b't';
pub(super) const EMPTY_TUPLE: u8 = b')';
pub(super) const SETITEMS: u8 = b'u';
pub(super) const BINFLOAT: u8 = b'G';

// Protocol 2.
pub(super) const PROTO: u8 = 0x80;
pub(super) const NEWOBJ: u8 = 0x81;
pub(super) const EXT1: u8 = 0x82;
pub(super) const EXT2: u8 = 0x83;
pub(super) const EXT4: u8 = 0x84;
pub(super) const TUPLE1: u8 = 0x85;
pub(super) const TUPLE2: u8 = 0x86;
pub(super) const TUPLE3: u8 = 0x87;
pub(super) const NEWTRUE: u8 = 0x88;
pub(super) const NEWFALSE: u8 = 0x89;
pub(super) const LONG1: u8 = 0x8a;
pub(super) const LONG4: u8 = 0x8b;

// Protocol 3.
pub(super) const BINBYTES: u8 = b'B';
pub(super) const SHORT_BINBYTES: u8 = b'C';

// Protocol 4.
pub(super) const SHORT_BINUNICODE: u8 = 0x8c;
pub(super) const BINUNICODE8: u8 = 0x8d;
pub(super) const BINBYTES8: u8 = 0x8e;
pub(super) const EMPTY_SET: u8 = 0x8f;
pub(super) const ADDITEMS: u8 = 0x90;
pub(super) const FROZENSET: u8 = 0x91;
pub(super) const NEWOBJ_EX: u8 = 0x92;
pub(super) const STACK_GLOBAL: u8 = 0x93;
pub(super) const MEMOIZE: u8 = 0x94;
pub(super) const FRAME: u8 = 0x95;

// Protocol 5.
pub(super) const BYTEARRAY8: u8 = 0x96;
pub(super) const NEXT_BUFFER: u8 = 0x97;
pub(super) const READONLY_BUFFER: u8 = 0x98;

/// An opcode's name, for errors (those the machine refuses: the others never need one).
pub(super) fn opcode_name(op: u8) -> &'static str {
    match op {
        INT => "INT",
        LONG => "LONG",
        FLOAT => "FLOAT",
        STRING => "STRING",
        UNICODE => "UNICODE",
        PERSID => "PERSID",
        GET => "GET",
        PUT => "PUT",
        INST => "INST",
        OBJ => "OBJ",
        EXT1 | EXT2 | EXT4 => "EXT",
        NEWOBJ_EX => "NEWOBJ_EX",
        BYTEARRAY8 => "BYTEARRAY8",
        NEXT_BUFFER => "NEXT_BUFFER",
        READONLY_BUFFER => "READONLY_BUFFER",
        _ => "unknown",
    }
}
