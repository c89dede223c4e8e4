#!/usr/bin/env python3
# Prints the op table of docs/protocol.md section 5 from src/ir/ops.h (codes, fields in wire order,
# wire types, the declaration comment). tests/unit/protocol checks the table against the build.
#   scripts/protocol_op_table.py [src/ir/ops.h]
import re, sys
src = open(sys.argv[1] if len(sys.argv) > 1 else 'src/ir/ops.h').read()
# struct declarations
structs={}
for m in re.finditer(r'struct (\w+) \{(?:\s*//([^\n]*))?\n(.*?)TW_FIELDS\(([^)]*)\)', src, re.S):
    name, comment, body, fields = m.group(1), (m.group(2) or '').strip(), m.group(3), m.group(4)
    # parse member types
    types={}
    body2=re.sub(r'//[^\n]*','',body)
    for decl in body2.split(';'):
        decl=decl.strip()
        if not decl: continue
        mm=re.match(r'((?:std::vector<\w+>)|[\w:]+)\s+(.*)',decl,re.S)
        if not mm: continue
        t=mm.group(1); rest=mm.group(2)
        # split names on commas not inside braces
        depth=0; cur=''; names=[]
        for ch in rest:
            if ch in '{(': depth+=1
            if ch in '})': depth-=1
            if ch==',' and depth==0: names.append(cur); cur=''
            else: cur+=ch
        names.append(cur)
        for n in names:
            n=n.strip().split('=')[0].split('{')[0].strip()
            types[n]=t
    fl=[f.strip() for f in fields.split(',')]
    structs[name]=(comment,[(f,types.get(f,'?')) for f in fl])
lst=re.search(r'#define TW_OP_LIST\(X\)(.*?)\n\n',src,re.S).group(1)
ops=re.findall(r'X\((\w+), (\d+)(?:, \d+)?\)',lst)
tmap={'In':'In','Out':'Out','std::vector<In>':'In[]','std::vector<int64_t>':'i64[]','Shape':'i64[]','int64_t':'i64','uint64_t':'u64','double':'f64','bool':'bool','DType':'DType','Scalar':'Scalar','Bytes':'Bytes','UnaryKind':'UnaryKind','BinaryKind':'BinaryKind','ReduceKind':'ReduceKind','PoolKind':'PoolKind','BlockFormat':'BlockFormat'}
print('| code | op | fields, in wire order | notes |')
print('|---:|---|---|---|')
for n,c in ops:
    comment,fl=structs[n]
    fs=', '.join(f'{f}: {tmap.get(t,t)}' for f,t in fl)
    print(f'| {c} | {n} | {fs} | {comment} |')
