# Decoder library sources (everything but main.c), shared with decoder/fuzz/ and bench builds.
DECODER_SRCS := crc32c.c packet.c reasm.c pdu_stream.c iscsi.c scsi.c scsi_names.c session.c input.c mapped.c output.c segments_out.c segments_bin.c
DECODER_HDRS := decode.h core.h crc32c.h packet.h scsi.h scsi_names.h output.h segments_out.h
DECODER_LIBS := -lpcap -lz
# Flags every build of these sources needs (the files also define _GNU_SOURCE themselves).
DECODER_CFLAGS := -std=c11 -D_GNU_SOURCE
