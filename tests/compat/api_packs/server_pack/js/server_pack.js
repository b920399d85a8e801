export const serverPack = true;
